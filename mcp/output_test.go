package mcp

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

var markerRe = regexp.MustCompile(`\[\.\.\. (\d+) bytes omitted \.\.\.\]`)

func omittedIn(t *testing.T, text string) int64 {
	t.Helper()
	m := markerRe.FindAllStringSubmatch(text, -1)
	if len(m) != 1 {
		t.Fatalf("want exactly one omission marker, found %d in %q", len(m), clipForLog(text))
	}
	var n int64
	fmt.Sscan(m[0][1], &n)
	return n
}

func clipForLog(s string) string {
	if len(s) <= 200 {
		return s
	}
	return s[:100] + "…" + s[len(s)-100:]
}

func TestRenderSmallOutputIsStrippedOnly(t *testing.T) {
	r := render([]byte("\x1b[1;32mok\x1b[0m\r\n\x1b]0;title\x07done\n"), 0, 0, 100)
	if r.Text != "ok\ndone\n" || r.Omitted != 0 {
		t.Fatalf("got %q omitted %d", r.Text, r.Omitted)
	}
}

func TestRenderCapsKeepingHeadAndTail(t *testing.T) {
	var b strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&b, "line %05d\n", i)
	}
	in := b.String()
	r := render([]byte(in), 0, 0, 1000)
	body := markerRe.ReplaceAllString(r.Text, "")
	kept := len(body) - 1 // the marker line's newline
	if kept > 1000 {
		t.Fatalf("kept %d bytes, cap 1000", kept)
	}
	if !strings.HasPrefix(r.Text, "line 00000\n") || !strings.HasSuffix(r.Text, "line 04999\n") {
		t.Fatalf("head or tail lost: %q", clipForLog(r.Text))
	}
	if got := omittedIn(t, r.Text); got != r.Omitted || int(r.Omitted)+kept != len(in) {
		t.Fatalf("omitted %d (marker %d) + kept %d != %d", r.Omitted, got, kept, len(in))
	}
	// Cuts land on line boundaries: every kept line is whole.
	for _, l := range strings.Split(strings.TrimSuffix(r.Text, "\n"), "\n") {
		if !regexp.MustCompile(`^(line \d{5}|\[\.\.\. \d+ bytes omitted \.\.\.\])$`).MatchString(l) {
			t.Fatalf("cut inside a line: %q", l)
		}
	}
}

func TestRenderNeverSplitsUTF8(t *testing.T) {
	in := strings.Repeat("é€😀", 2000) // no newlines: cuts fall back to rune boundaries
	for _, limit := range []int{7, 100, 1001, 5003} {
		r := render([]byte(in), 0, 0, limit)
		if !utf8.ValidString(r.Text) || strings.ContainsRune(r.Text, utf8.RuneError) {
			t.Fatalf("limit %d: invalid UTF-8 in %q", limit, clipForLog(r.Text))
		}
		kept := len(strings.ReplaceAll(markerRe.ReplaceAllString(r.Text, ""), "\n", ""))
		if kept > limit || int(r.Omitted)+kept != len(in) {
			t.Fatalf("limit %d: kept %d omitted %d of %d", limit, kept, r.Omitted, len(in))
		}
	}
}

func TestRenderEscapeSequencesDoNotCountAgainstTheCap(t *testing.T) {
	in := strings.Repeat("\x1b[38;5;196m\x1b[1mx\x1b[0m", 100) // 100 visible bytes
	r := render([]byte(in), 0, 0, 100)
	if r.Text != strings.Repeat("x", 100) || r.Omitted != 0 {
		t.Fatalf("got %q omitted %d", r.Text, r.Omitted)
	}
}

func TestRenderRegistryGap(t *testing.T) {
	data := []byte("head line\n\x1b[31mtail line\x1b[0m\n")
	r := render(data, len("head line\n"), 12345, 1000)
	if r.Text != "head line\n[... 12345 bytes omitted ...]\ntail line\n" || r.Omitted != 12345 {
		t.Fatalf("got %q omitted %d", r.Text, r.Omitted)
	}
	// With a cap as well, both omissions add up in one marker.
	long := []byte(strings.Repeat("h", 600) + strings.Repeat("t", 600))
	r = render(long, 600, 1000, 400)
	if got := omittedIn(t, r.Text); got != r.Omitted || r.Omitted != 1000+800 {
		t.Fatalf("omitted %d (marker %d), want 1800", r.Omitted, got)
	}
	if !strings.HasPrefix(r.Text, "hhh") || !strings.HasSuffix(r.Text, "ttt") {
		t.Fatalf("head or tail lost: %q", clipForLog(r.Text))
	}
}

func TestRenderInvalidUTF8BecomesReplacement(t *testing.T) {
	r := render([]byte{'a', 0xff, 'b'}, 0, 0, 100)
	if r.Text != "a\uFFFDb" {
		t.Fatalf("got %q", r.Text)
	}
}

func TestDurationAcceptsSecondsAndStrings(t *testing.T) {
	for in, want := range map[string]time.Duration{
		`90`: 90 * time.Second, `2.5`: 2500 * time.Millisecond, `"90"`: 90 * time.Second,
		`"90s"`: 90 * time.Second, `"1h30m"`: 90 * time.Minute, `0`: 0,
	} {
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err != nil || d.D != want {
			t.Errorf("%s: got %v, %v; want %v", in, d.D, err, want)
		}
	}
	// The daemon's API reads them alike (internal/duration).
	for _, in := range []string{`"soon"`, `true`, `[1]`, `1e300`, `{}`} {
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err == nil {
			t.Errorf("%s: accepted as %v", in, d.D)
		}
	}
	// A negative one is read, for the tool to refuse naming the argument
	// (the SDK's decoding error cannot name it).
	for in, want := range map[string]time.Duration{`-1`: -time.Second, `"-5s"`: -5 * time.Second} {
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err != nil || d.D != want {
			t.Errorf("%s: got %v, %v; want %v for the tool to refuse", in, d.D, err, want)
		}
	}
}

func TestCheckLoopback(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:8765", "[::1]:0", "localhost:1", "127.1.2.3:9"} {
		if err := CheckLoopback(ok); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"0.0.0.0:8765", ":8765", "192.168.1.2:80", "example.com:80", "[::]:1", "127.0.0.1"} {
		if err := CheckLoopback(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
