package mcp

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var markerRe = regexp.MustCompile(`\[\.\.\. (\d+) bytes omitted \.\.\.\]`)

func omittedIn(t *testing.T, text string) int64 {
	t.Helper()
	m := markerRe.FindAllStringSubmatch(text, -1)
	require.Len(t, m, 1, "want exactly one omission marker in %q", clipForLog(text))
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
	require.Equal(t, "ok\ndone\n", r.Text)
	require.Zero(t, r.Omitted)
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
	require.LessOrEqual(t, kept, 1000, "the cap")
	require.True(t, strings.HasPrefix(r.Text, "line 00000\n") && strings.HasSuffix(r.Text, "line 04999\n"), "head or tail lost: %q", clipForLog(r.Text))
	require.Equal(t, r.Omitted, omittedIn(t, r.Text), "the marker says what was omitted")
	require.Equal(t, len(in), int(r.Omitted)+kept, "omitted + kept")
	// Cuts land on line boundaries: every kept line is whole.
	for _, l := range strings.Split(strings.TrimSuffix(r.Text, "\n"), "\n") {
		require.Regexp(t, `^(line \d{5}|\[\.\.\. \d+ bytes omitted \.\.\.\])$`, l, "cut inside a line")
	}
}

func TestRenderNeverSplitsUTF8(t *testing.T) {
	in := strings.Repeat("é€😀", 2000) // no newlines: cuts fall back to rune boundaries
	for _, limit := range []int{7, 100, 1001, 5003} {
		r := render([]byte(in), 0, 0, limit)
		require.True(t, utf8.ValidString(r.Text), "limit %d: invalid UTF-8 in %q", limit, clipForLog(r.Text))
		require.NotContains(t, r.Text, string(utf8.RuneError), "limit %d", limit)
		kept := len(strings.ReplaceAll(markerRe.ReplaceAllString(r.Text, ""), "\n", ""))
		require.LessOrEqual(t, kept, limit, "limit %d", limit)
		require.Equal(t, len(in), int(r.Omitted)+kept, "limit %d: omitted + kept", limit)
	}
}

func TestRenderEscapeSequencesDoNotCountAgainstTheCap(t *testing.T) {
	in := strings.Repeat("\x1b[38;5;196m\x1b[1mx\x1b[0m", 100) // 100 visible bytes
	r := render([]byte(in), 0, 0, 100)
	require.Equal(t, strings.Repeat("x", 100), r.Text)
	require.Zero(t, r.Omitted)
}

func TestRenderRegistryGap(t *testing.T) {
	data := []byte("head line\n\x1b[31mtail line\x1b[0m\n")
	r := render(data, len("head line\n"), 12345, 1000)
	require.Equal(t, "head line\n[... 12345 bytes omitted ...]\ntail line\n", r.Text)
	require.EqualValues(t, 12345, r.Omitted)
	// With a cap as well, both omissions add up in one marker.
	long := []byte(strings.Repeat("h", 600) + strings.Repeat("t", 600))
	r = render(long, 600, 1000, 400)
	require.EqualValues(t, 1000+800, r.Omitted)
	require.Equal(t, r.Omitted, omittedIn(t, r.Text), "the marker says what was omitted")
	require.True(t, strings.HasPrefix(r.Text, "hhh") && strings.HasSuffix(r.Text, "ttt"), "head or tail lost: %q", clipForLog(r.Text))
}

func TestRenderInvalidUTF8BecomesReplacement(t *testing.T) {
	r := render([]byte{'a', 0xff, 'b'}, 0, 0, 100)
	require.Equal(t, "a\uFFFDb", r.Text)
}

func TestDurationAcceptsSecondsAndStrings(t *testing.T) {
	for in, want := range map[string]time.Duration{
		`90`: 90 * time.Second, `2.5`: 2500 * time.Millisecond, `"90"`: 90 * time.Second,
		`"90s"`: 90 * time.Second, `"1h30m"`: 90 * time.Minute, `0`: 0,
	} {
		var d Duration
		if assert.NoError(t, json.Unmarshal([]byte(in), &d), in) {
			assert.Equal(t, want, d.D, in)
		}
	}
	// The daemon's API reads them alike (internal/duration).
	for _, in := range []string{`"soon"`, `true`, `[1]`, `1e300`, `{}`} {
		var d Duration
		err := json.Unmarshal([]byte(in), &d)
		assert.Error(t, err, "%s: accepted as %v", in, d.D)
	}
	// A negative one is read, for the tool to refuse naming the argument
	// (the SDK's decoding error cannot name it).
	for in, want := range map[string]time.Duration{`-1`: -time.Second, `"-5s"`: -5 * time.Second} {
		var d Duration
		if assert.NoError(t, json.Unmarshal([]byte(in), &d), in) {
			assert.Equal(t, want, d.D, "%s: read for the tool to refuse", in)
		}
	}
}

func TestCheckLoopback(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:8765", "[::1]:0", "localhost:1", "127.1.2.3:9"} {
		assert.NoError(t, CheckLoopback(ok), ok)
	}
	for _, bad := range []string{"0.0.0.0:8765", ":8765", "192.168.1.2:80", "example.com:80", "[::]:1", "127.0.0.1"} {
		assert.Error(t, CheckLoopback(bad), "%s accepted", bad)
	}
}
