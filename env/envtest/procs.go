package envtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/env"
)

var (
	markerMu   sync.Mutex
	markerUsed = map[string]bool{}
)

// NewMarker returns a fresh marker: a random 8-digit number, unique within
// this test binary and random enough (1 in 90 million) that concurrent
// runs on the same sandbox do not collide. Used as a sleep duration
// ("sleep 48213377", years) it makes a process that never ends by itself
// during a test and that ScanProcs can find.
func NewMarker() string {
	markerMu.Lock()
	defer markerMu.Unlock()
	for {
		m := strconv.Itoa(10_000_000 + rand.IntN(90_000_000))
		if !markerUsed[m] {
			markerUsed[m] = true
			return m
		}
	}
}

func newMarkers(n int) []string {
	ms := make([]string, n)
	for i := range ms {
		ms[i] = NewMarker()
	}
	return ms
}

// exportMarkers returns a shell line exporting markers as M0, M1, … for
// scripts to use as "$M0". The literal in the script is split by an empty
// pair of single quotes between its halves, so the command line of the shell running the
// script does not carry the markers: only the processes that use them do,
// and a scan finds exactly those.
func exportMarkers(markers []string) string {
	var b strings.Builder
	b.WriteString("export")
	for i, m := range markers {
		fmt.Fprintf(&b, " M%d=%s''%s", i, m[:len(m)/2], m[len(m)/2:])
	}
	b.WriteString("\n")
	return b.String()
}

var markerPattern = regexp.MustCompile(`^[A-Za-z0-9]{6,64}$`)

func checkMarkers(markers []string) error {
	if len(markers) == 0 {
		return fmt.Errorf("envtest: no markers given")
	}
	for _, m := range markers {
		if !markerPattern.MatchString(m) {
			return fmt.Errorf("envtest: marker %q must match %s", m, markerPattern)
		}
	}
	return nil
}

// selfExcluding returns a grep/glob pattern that matches m but not its own
// text ("[4]8213377" matches "48213377"), so the scanning process never
// finds itself.
func selfExcluding(m string) string { return "[" + m[:1] + "]" + m[1:] }

// scanScript lists "PID ARGS" lines of the processes whose command line
// contains one of markers. With /proc (Linux, containers) grep picks the
// matching cmdline files in a single process; elsewhere ps lists every
// process and the caller filters.
func scanScript(markers []string) string {
	var pats strings.Builder
	for _, m := range markers {
		fmt.Fprintf(&pats, " -e '%s'", selfExcluding(m))
	}
	return `if [ -r /proc/self/cmdline ]; then
  for f in $(grep -l -s` + pats.String() + ` /proc/[0-9]*/cmdline 2>/dev/null); do
    p=${f#/proc/}; p=${p%/cmdline}
    a=$(tr '\000\n' '  ' 2>/dev/null <"$f") || continue
    printf '%s %s\n' "$p" "$a"
  done
  exit 0
fi
exec ps -A -o pid= -o args=`
}

// ScanProcs lists, through a new process started in e, the processes of
// the sandbox whose command line contains one of markers as a whole word,
// and returns their PIDs by marker (markers found nowhere have no entry).
// Markers must match [A-Za-z0-9]{6,64}; use NewMarker. Zombies (already
// dead, not yet reaped) are not listed.
func ScanProcs(ctx context.Context, e env.Environment, markers ...string) (map[string][]int, error) {
	if err := checkMarkers(markers); err != nil {
		return nil, err
	}
	p, err := e.Start(ctx, env.Spec{Command: scanScript(markers)})
	if err != nil {
		return nil, fmt.Errorf("envtest: scan processes: %w", err)
	}
	defer p.Release()
	out, err := ReadAll(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("envtest: scan processes: %w", err)
	}
	st, err := p.Wait(ctx)
	if err != nil {
		return nil, fmt.Errorf("envtest: scan processes: wait: %w", err)
	}
	if !st.Success() {
		return nil, fmt.Errorf("envtest: scan processes: %v, output %q", st, clip(out))
	}
	res := map[string][]int{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := strings.TrimLeft(sc.Text(), " \t")
		if line == "" {
			continue
		}
		pidText, args, _ := strings.Cut(line, " ")
		pid, err := strconv.Atoi(pidText)
		if err != nil {
			return nil, fmt.Errorf("envtest: scan processes: unexpected line %q in output %q", line, clip(out))
		}
		for _, m := range markers {
			if containsWord(args, m) {
				res[m] = append(res[m], pid)
			}
		}
	}
	return res, sc.Err()
}

// containsWord reports whether word occurs in s not adjacent to another
// letter or digit.
func containsWord(s, word string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], word)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(word)
		if (start == 0 || !isAlnum(s[start-1])) && (end == len(s) || !isAlnum(s[end])) {
			return true
		}
		i = start + 1
	}
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// KillMarked sends SIGKILL, through a new process started in e, to every
// process of the sandbox whose command line contains one of markers, and
// to nothing else: with /proc each command line is checked again right
// before its kill. It is the safety net that keeps a failed test from
// leaving processes behind.
func KillMarked(ctx context.Context, e env.Environment, markers ...string) error {
	found, err := ScanProcs(ctx, e, markers...)
	if err != nil {
		return err
	}
	var pids []int
	for _, ps := range found {
		pids = append(pids, ps...)
	}
	if len(pids) == 0 {
		return nil
	}
	slices.Sort(pids)
	pids = slices.Compact(pids)
	var list, cases strings.Builder
	for _, p := range pids {
		fmt.Fprintf(&list, " %d", p)
	}
	for i, m := range markers {
		if i > 0 {
			cases.WriteByte('|')
		}
		fmt.Fprintf(&cases, "*%s*", selfExcluding(m))
	}
	script := `for p in` + list.String() + `; do
  if [ -r /proc/self/cmdline ]; then
    case "$(tr '\000\n' '  ' 2>/dev/null </proc/$p/cmdline)" in ` + cases.String() + `) kill -9 "$p" 2>/dev/null;; esac
  else
    kill -9 "$p" 2>/dev/null
  fi
done
exit 0`
	p, err := e.Start(ctx, env.Spec{Command: script})
	if err != nil {
		return fmt.Errorf("envtest: kill marked processes: %w", err)
	}
	defer p.Release()
	if _, err := ReadAll(ctx, p); err != nil {
		return fmt.Errorf("envtest: kill marked processes: %w", err)
	}
	if _, err := p.Wait(ctx); err != nil {
		return fmt.Errorf("envtest: kill marked processes: %w", err)
	}
	return nil
}

// killMarkedAtCleanup registers the safety net for markers. Register it
// after the Environment it uses, so it runs before that Environment is
// closed.
func (s *suite) killMarkedAtCleanup(t *testing.T, e env.Environment, markers ...string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		defer cancel()
		// An Environment the test closed on purpose (re-attach) cannot scan;
		// another registration covers the markers then.
		if err := KillMarked(ctx, e, markers...); err != nil && !errors.Is(err, env.ErrReleased) {
			t.Logf("cleanup: killing leftover marked processes %v: %v", markers, err)
		}
	})
}

// waitProcs polls the process table until every marker is present (want
// true) or none is (want false), and fails the test at the deadline with
// what it last saw.
func (s *suite) waitProcs(t *testing.T, e env.Environment, want bool, markers ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	delay := 20 * time.Millisecond
	for {
		found, err := ScanProcs(ctx, e, markers...)
		if err != nil {
			t.Fatalf("scanning for markers %v: %v", markers, err)
		}
		done := true
		for _, m := range markers {
			if _, ok := found[m]; ok != want {
				done = false
			}
		}
		if done {
			return
		}
		select {
		case <-ctx.Done():
			if want {
				var missing []string
				for _, m := range markers {
					if _, ok := found[m]; !ok {
						missing = append(missing, m)
					}
				}
				t.Fatalf("processes with markers %v never appeared within %v (all markers: %v, found: %v)", missing, s.timeout, markers, found)
			}
			t.Fatalf("processes still alive %v after the kill (marker → PIDs: %v)", s.timeout, found)
		case <-time.After(delay):
		}
		delay = min(delay*2, 500*time.Millisecond)
	}
}
