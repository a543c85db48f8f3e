// Package duration is corral's one wire form of a duration, shared by the
// daemon's HTTP API and the MCP tools, so that the same value means the same
// time whichever front end it reaches:
//
//   - a JSON number is seconds, fractions allowed: 3600, 2.5;
//   - a string is a Go duration ("90s", "10m", "1h30m", "250ms"), or a
//     number of seconds written as a string ("90"), which models write;
//   - null is no value (zero);
//   - anything else — a negative value, true, an object, a list, garbage —
//     is an error that says what to give instead, and never echoes more
//     than a few bytes of what it got.
//
// Durations are written as Go duration strings ("1h0m0s").
package duration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Duration is a time.Duration with the wire form of this package.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String is the Go duration string, as MarshalJSON writes it.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration in any form the package accepts. Its
// error is a *json.UnmarshalTypeError, the one kind encoding/json
// completes with the name of the field it was decoding: Named turns it
// back into this package's error, with that name.
func (d *Duration) UnmarshalJSON(b []byte) error {
	v, err := FromJSON(b)
	if err != nil {
		return &json.UnmarshalTypeError{Value: err.Error(), Type: durationType}
	}
	*d = Duration(v)
	return nil
}

var durationType = reflect.TypeFor[Duration]()

// Named returns the error of a Duration field's decoding (see
// UnmarshalJSON) as an error of this package that names the field:
// `ttl: duration -1: is negative: give seconds…`. Any other error is
// returned as it is.
func Named(err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Type != durationType {
		return err
	}
	return &named{field: te.Field, msg: te.Value}
}

type named struct{ field, msg string }

func (e *named) Error() string {
	if e.field == "" {
		return e.msg
	}
	return e.field + ": " + e.msg
}

func (e *named) Is(target error) bool { return target == ErrInvalid }

// Hint is what every error of this package asks for.
const Hint = `give seconds (90) or a duration such as "90s", "10m" or "1h30m"`

// ErrInvalid is matched by every error of this package.
var ErrInvalid = errors.New("invalid duration")

// invalid is an error of this package: the value shown clipped, then Hint
// (or why).
type invalid struct {
	shown string
	why   string
	// negative is the value of a well-formed negative duration.
	negative time.Duration
}

// Negative returns the value of a well-formed but negative duration that
// err (an error of FromJSON or Parse) refused, for a caller that reports
// it in words of its own (naming the argument); ok is false for any other
// error.
func Negative(err error) (d time.Duration, ok bool) {
	var e *invalid
	if errors.As(err, &e) && e.negative < 0 {
		return e.negative, true
	}
	return 0, false
}

func (e *invalid) Error() string {
	why := e.why
	if why == "" {
		why = Hint
	}
	return fmt.Sprintf("duration %s: %s", e.shown, why)
}

func (e *invalid) Is(target error) bool { return target == ErrInvalid }

// maxShown bounds how much of a bad value an error repeats.
const maxShown = 32

// show returns b for an error: at most maxShown bytes, cut on a rune
// boundary, marked when cut.
func show(b []byte) string {
	s := string(bytes.TrimSpace(b))
	if len(s) <= maxShown {
		return s
	}
	cut := maxShown
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// FromJSON reads one JSON value (a number, a string or null) as a
// duration; see the package doc for what is accepted.
func FromJSON(b []byte) (time.Duration, error) {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0:
		return 0, &invalid{shown: `""`}
	case string(b) == "null":
		return 0, nil
	case b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return 0, &invalid{shown: show(b)}
		}
		v, err := Parse(s)
		if err != nil {
			return 0, err
		}
		return v, nil
	case b[0] == '-' || (b[0] >= '0' && b[0] <= '9'):
		f, err := strconv.ParseFloat(string(b), 64)
		if err != nil {
			return 0, &invalid{shown: show(b)}
		}
		return fromSeconds(f, show(b))
	}
	return 0, &invalid{shown: show(b)}
}

// Parse reads a duration given as a string: a Go duration ("90s") or
// seconds ("90", "2.5"); "" is zero. Negative durations are refused.
func Parse(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, nil
	}
	shown := strconv.Quote(show([]byte(t)))
	if f, err := strconv.ParseFloat(t, 64); err == nil {
		return fromSeconds(f, shown)
	}
	v, err := time.ParseDuration(t)
	if err != nil {
		return 0, &invalid{shown: shown}
	}
	if v < 0 {
		return 0, &invalid{shown: shown, why: "is negative: " + Hint, negative: v}
	}
	return v, nil
}

// maxSeconds is the longest duration in seconds that time.Duration holds.
const maxSeconds = float64(math.MaxInt64 / int64(time.Second))

func fromSeconds(f float64, shown string) (time.Duration, error) {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0) || f > maxSeconds:
		return 0, &invalid{shown: shown, why: "is out of range: " + Hint}
	case f < 0:
		return 0, &invalid{shown: shown, why: "is negative: " + Hint, negative: time.Duration(f * float64(time.Second))}
	}
	return time.Duration(f * float64(time.Second)), nil
}

// String returns the wire form of d, "" for zero: for optional fields
// that travel as strings (query parameters).
func String(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}
