package mcp

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Duration is a tool argument that accepts seconds as a JSON number (90,
// 2.5) or a string holding either seconds ("90") or a Go duration ("90s",
// "10m", "1h30m"). Models write both; accepting both saves a failed call.
type Duration struct {
	D time.Duration
}

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	switch x := v.(type) {
	case float64:
		return d.fromSeconds(x, string(b))
	case string:
		s := strings.TrimSpace(x)
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return d.fromSeconds(f, strconv.Quote(x))
		}
		td, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: use seconds (90) or a Go duration such as \"90s\", \"10m\", \"1h30m\"", x)
		}
		d.D = td
		return nil
	default:
		return fmt.Errorf("duration %s: use seconds (90) or a Go duration string such as \"90s\" or \"10m\"", b)
	}
}

func (d *Duration) fromSeconds(f float64, shown string) error {
	if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > float64(math.MaxInt64/int64(time.Second)) {
		return fmt.Errorf("duration %s is out of range", shown)
	}
	d.D = time.Duration(f * float64(time.Second))
	return nil
}

// MarshalJSON implements json.Marshaler: the Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(d.D.String())
}
