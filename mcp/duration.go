package mcp

import (
	"encoding/json"
	"time"

	"github.com/corralhq/corral/internal/duration"
)

// Duration is a tool argument in the one wire form of corral's durations
// (internal/duration), the same the daemon's API reads: seconds as a JSON
// number (90, 2.5), or a string holding a Go duration ("90s", "10m",
// "1h30m") or seconds ("90"). Models write both; accepting both saves a
// failed call. A bool or an object fails the call with a short message
// that says what to give; a negative value is read, and refused by the
// tool in a message that names the argument.
type Duration struct {
	D time.Duration
}

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	v, err := duration.FromJSON(b)
	if n, ok := duration.Negative(err); ok {
		// The tool refuses it naming the argument ("timeout" is
		// negative): the SDK reports a decoding error without its name.
		d.D = n
		return nil
	}
	if err != nil {
		return err
	}
	d.D = v
	return nil
}

// MarshalJSON implements json.Marshaler: the Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(d.D.String())
}
