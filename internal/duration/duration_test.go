package duration

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFromJSON(t *testing.T) {
	good := []struct {
		in   string
		want time.Duration
	}{
		{`3600`, time.Hour},
		{`2.5`, 2500 * time.Millisecond},
		{`0`, 0},
		{`"1h"`, time.Hour},
		{`"1h30m"`, 90 * time.Minute},
		{`"250ms"`, 250 * time.Millisecond},
		{`"90"`, 90 * time.Second},
		{`" 10m "`, 10 * time.Minute},
		{`""`, 0},
		{`null`, 0},
		{`1e3`, 1000 * time.Second},
	}
	for _, tc := range good {
		got, err := FromJSON([]byte(tc.in))
		assert.Truef(t, err == nil && got == tc.want, "FromJSON(%s) = %v, %v; want %v", tc.in, got, err, tc.want)
	}
	bad := []string{`true`, `false`, `{}`, `{"s":1}`, `[1]`, `-1`, `"-5s"`, `"-5"`, `"soon"`, `"5 parsecs"`,
		`1e300`, `"1e300"`, `NaN`, `"` + strings.Repeat("x", 10000) + `"`, strings.Repeat("9", 5000)}
	for _, in := range bad {
		_, err := FromJSON([]byte(in))
		if err == nil {
			assert.Fail(t, fmt.Sprintf("FromJSON(%.40s) accepted it", in))
			continue
		}
		assert.Truef(t, errors.Is(err, ErrInvalid), "FromJSON(%.40s) = %v, which does not match ErrInvalid", in, err)
		msg := err.Error()
		assert.Truef(t, len(msg) <= 200 && strings.Contains(msg, "give seconds"), "FromJSON(%.40s): error %q: want a short message that says what to give", in, msg)
	}
}

// TestInStruct: a field of type Duration reads every form, and a bad one
// fails the whole decode.
func TestInStruct(t *testing.T) {
	var v struct {
		TTL   Duration  `json:"ttl"`
		Grace *Duration `json:"grace"`
	}
	require.NoError(t, json.Unmarshal([]byte(`{"ttl":3600,"grace":"5s"}`), &v))
	if v.TTL.D() != time.Hour || v.Grace == nil || v.Grace.D() != 5*time.Second {
		assert.Fail(t, fmt.Sprintf("decoded %v, %v; want 1h, 5s", v.TTL.D(), v.Grace))
	}
	if err := json.Unmarshal([]byte(`{"ttl":true}`), &v); err == nil {
		assert.Fail(t, `"ttl": true was accepted`)
	} else if err := Named(err); !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), "ttl: duration true: ") {
		assert.Fail(t, fmt.Sprintf(`"ttl": true: Named gives %q, want an ErrInvalid naming ttl`, err))
	}
	var nested struct {
		Kill struct {
			Grace Duration `json:"grace"`
		} `json:"kill"`
	}
	if err := Named(json.Unmarshal([]byte(`{"kill":{"grace":-5}}`), &nested)); err == nil || !strings.HasPrefix(err.Error(), "kill.grace: duration -5: is negative") {
		assert.Fail(t, fmt.Sprintf("nested negative grace: %v", err))
	}
	if err := errors.New("other"); Named(err) != err {
		assert.Fail(t, "Named changed an error that is not a duration's")
	}
	b, err := json.Marshal(v)
	assert.Truef(t, err == nil && string(b) == `{"ttl":"1h0m0s","grace":"5s"}`, "Marshal = %s, %v", b, err)
	// What is written reads back the same.
	var back struct {
		TTL   Duration  `json:"ttl"`
		Grace *Duration `json:"grace"`
	}
	if err := json.Unmarshal(b, &back); err != nil || back.TTL != v.TTL || *back.Grace != *v.Grace {
		assert.Fail(t, fmt.Sprintf("round trip: %+v, %v", back, err))
	}
}

// TestNegative: a well-formed negative value is refused, and its value is
// there for a caller that names the argument in its own words.
func TestNegative(t *testing.T) {
	for in, want := range map[string]time.Duration{`-5`: -5 * time.Second, `"-1s"`: -time.Second, `"-2"`: -2 * time.Second} {
		_, err := FromJSON([]byte(in))
		got, ok := Negative(err)
		assert.Truef(t, ok && got == want, "Negative(FromJSON(%s)) = %v, %v; want %v", in, got, ok, want)
	}
	for _, in := range []string{`true`, `"soon"`, `1e400`} {
		_, err := FromJSON([]byte(in))
		_, ok := Negative(err)
		assert.Falsef(t, ok, "Negative(FromJSON(%s)) claims a negative value", in)
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 0, "30s": 30 * time.Second, "30": 30 * time.Second, "0.5": 500 * time.Millisecond} {
		got, err := Parse(in)
		assert.Truef(t, err == nil && got == want, "Parse(%q) = %v, %v; want %v", in, got, err, want)
	}
	for _, in := range []string{"-1s", "-3", "x", "1y"} {
		_, err := Parse(in)
		assert.Truef(t, errors.Is(err, ErrInvalid), "Parse(%q) = %v, want ErrInvalid", in, err)
	}
}
