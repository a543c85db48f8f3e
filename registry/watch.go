package registry

import (
	"bytes"
	"fmt"
	"regexp"
	"time"
	"unicode/utf8"

	"github.com/corralhq/corral/registry/ansi"
)

// maxWatchLine bounds a line kept for matching; a longer line is matched
// as it stands and the rest starts a new one.
const maxWatchLine = 64 << 10

// watcher matches a process's output lines against its watch patterns and
// applies the per-process rate limit. It is used only by the process's
// copying goroutine.
type watcher struct {
	substrings []string
	regexps    []*regexp.Regexp
	lines      lineSplitter

	windowStart  time.Time
	windowActive bool
	limited      bool // a match was held back in the current window
	limitedRun   int  // consecutive windows in which matches were held back
	disabled     bool
}

func newWatcher(substrings, regexps []string) (*watcher, error) {
	if len(substrings) == 0 && len(regexps) == 0 {
		return nil, nil
	}
	w := &watcher{}
	for _, s := range substrings {
		if s == "" {
			return nil, fmt.Errorf("%w: empty watch pattern: give a substring to look for in output lines", ErrInvalidOptions)
		}
		w.substrings = append(w.substrings, s)
	}
	for _, s := range regexps {
		re, err := regexp.Compile(s)
		if err != nil {
			return nil, fmt.Errorf("%w: watch regex %q: %v (Go RE2 syntax)", ErrInvalidOptions, s, err)
		}
		w.regexps = append(w.regexps, re)
	}
	return w, nil
}

// watchHit is what one match or the disabling produces.
type watchHit struct {
	typ     EventType
	pattern string
	line    string
}

// feed consumes output and returns the events it triggers. now is called
// once per match.
func (w *watcher) feed(p []byte, now func() time.Time, flush bool) []watchHit {
	if w.disabled {
		return nil
	}
	var hits []watchHit
	w.lines.feed(p, flush, func(line []byte) bool {
		hits = w.matchLine(line, now, hits)
		return !w.disabled
	})
	if w.disabled {
		w.lines = lineSplitter{}
	}
	return hits
}

// lineSplitter cuts output into complete lines after ANSI stripping,
// reassembling lines and escape sequences split across reads. The watch
// patterns and the readiness pattern use it; only the copying goroutine
// calls it.
type lineSplitter struct {
	strip   ansi.Stripper
	scratch []byte
	line    []byte // the incomplete last line
}

// feed consumes p and calls onLine with each complete line (with flush,
// also the incomplete last one), until onLine returns false. The line is
// valid only during the call.
func (s *lineSplitter) feed(p []byte, flush bool, onLine func(line []byte) bool) {
	s.scratch = s.strip.Append(s.scratch[:0], p)
	data := s.scratch
	more := true
	for len(data) > 0 && more {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			room := maxWatchLine - len(s.line)
			if len(data) < room {
				s.line = append(s.line, data...)
				break
			}
			s.line = append(s.line, data[:room]...)
			data = data[room:]
		} else {
			s.line = append(s.line, data[:i]...)
			data = data[i+1:]
		}
		more = onLine(s.line)
		s.line = s.line[:0]
	}
	if flush && len(s.line) > 0 && more {
		onLine(s.line)
		s.line = s.line[:0]
	}
	if cap(s.scratch) > 64<<10 {
		s.scratch = nil // do not keep a flood's worth of memory
	}
}

func (w *watcher) matchLine(line []byte, now func() time.Time, hits []watchHit) []watchHit {
	pattern := ""
	for _, s := range w.substrings {
		if bytes.Contains(line, []byte(s)) {
			pattern = s
			break
		}
	}
	if pattern == "" {
		for _, re := range w.regexps {
			if re.Match(line) {
				pattern = re.String()
				break
			}
		}
	}
	if pattern == "" {
		return hits
	}
	switch w.onMatch(now()) {
	case EventWatchMatch:
		hits = append(hits, watchHit{typ: EventWatchMatch, pattern: pattern, line: clip(string(line), maxEventLine)})
	case EventWatchDisabled:
		hits = append(hits, watchHit{typ: EventWatchDisabled, pattern: pattern, line: clip(string(line), maxEventLine)})
	}
	return hits
}

// onMatch applies the rate limit: the first match opens a WatchWindow and
// is reported; further matches in that window are held back and mark it
// limited. A window that opens within one WatchWindow of the end of a
// limited one continues the run; after WatchLimitedWindowsMax limited
// windows in a row watching is disabled. It returns the event to publish,
// or "".
func (w *watcher) onMatch(now time.Time) EventType {
	if w.disabled {
		return ""
	}
	if !w.windowActive || now.Sub(w.windowStart) >= WatchWindow {
		adjacent := w.windowActive && now.Sub(w.windowStart) < 2*WatchWindow
		if !w.limited || !adjacent {
			w.limitedRun = 0
		}
		w.windowStart, w.windowActive, w.limited = now, true, false
		return EventWatchMatch
	}
	if !w.limited {
		w.limited = true
		w.limitedRun++
		if w.limitedRun >= WatchLimitedWindowsMax {
			w.disabled = true
			return EventWatchDisabled
		}
	}
	return ""
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	// Do not end inside a UTF-8 sequence.
	for i := 0; i < utf8.UTFMax-1 && len(s) > 0 && !utf8.ValidString(s); i++ {
		s = s[:len(s)-1]
	}
	return s + "…"
}
