package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/internal/procstat"
)

// The fault suite (make chaos): tests named TestChaos… inject one fault on
// real components (docker pause and rm -f, a killed sshd, a TCP blackhole,
// a daemon or front end killed with SIGKILL, a full tmpfs, an OOM, bad
// input) and check corral's promise under it: every call returns within
// its bound, nothing runs untracked, nothing of corral is left running,
// and errors are short and say what to do. The bounds are the issue's
// promises (docs/reliability.md), not speed targets: speed lives in
// benchmarks.

// chaosWithin runs fn and fails the test when it took longer than bound.
// It returns how long fn took, for the figures in docs/reliability.md.
func chaosWithin(t *testing.T, what string, bound time.Duration, fn func()) time.Duration {
	t.Helper()
	start := time.Now()
	fn()
	took := time.Since(start)
	t.Logf("chaos: %s took %s (bound %s)", what, took.Round(time.Millisecond), bound)
	if took > bound {
		assert.Fail(t, fmt.Sprintf("chaos: %s took %s, over its bound of %s", what, took.Round(time.Millisecond), bound))
	}
	return took
}

// maxErrorBytes bounds an error corral shows to a person or a model: one
// or two short sentences, never an echo of a large input.
const maxErrorBytes = 400

// chaosShortError fails the test unless msg is a short error: at most
// maxErrorBytes, valid UTF-8, and without any of the given inputs echoed
// back (pass the parts of a large input that must not appear).
func chaosShortError(t *testing.T, msg string, inputs ...string) {
	t.Helper()
	msg = strings.TrimSpace(msg)
	if msg == "" {
		assert.Fail(t, "chaos: empty error message")
		return
	}
	assert.Truef(t, len(msg) <= maxErrorBytes, "chaos: error is %d bytes, over %d: %.200q…", len(msg), maxErrorBytes, msg)
	assert.Truef(t, utf8.ValidString(msg), "chaos: error is not valid UTF-8: %.200q", msg)
	for _, in := range inputs {
		assert.Truef(t, in == "" || !strings.Contains(msg, in), "chaos: error echoes its input (%.40q…): %.200q", in, msg)
	}
}

// corralMarkers are the words in the command line of corral's own helper
// processes: the nohup engine's wrapper and spares, and env/local's shim.
var corralMarkers = []string{"corral-parent", "corral-command", "corral-shim"}

// chaosLeftovers returns "PID cmdline" of live processes started at or
// after since whose command line holds one of corral's markers or one of
// extra (a test's own marker), skipping this test binary. Processes of
// earlier runs on the same machine are told apart by their start time.
// Tests running at the same time on the machine are not: a test that
// judges only its own processes narrows with chaosLeftoversWhere.
func chaosLeftovers(since time.Time, extra ...string) []string {
	return chaosLeftoversWhere(since, nil, extra...)
}

// chaosLeftoversWhere is chaosLeftovers narrowed to processes with an
// environment entry (NAME=VALUE) that match accepts (nil: every process).
// Every process of a test's daemon home has its directory in HOME or
// XDG_RUNTIME_DIR (homeScope), every session of a test's sshd
// SSH_CONNECTION ending in the server's port, every process of a
// container HOSTNAME set to the container's: so what a test leaves is
// told apart from what other tests on this machine run. A wrapper's long
// script is left out of the command line returned.
func chaosLeftoversWhere(since time.Time, match func(kv string) bool, extra ...string) []string {
	boot := bootTime()
	markers := append(slices.Clone(extra), corralMarkers...)
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		st, err := procstat.Read(pid)
		if err != nil || st.Exited() {
			continue
		}
		if !boot.IsZero() {
			started := boot.Add(time.Duration(st.StartTime) * time.Second / clockTicks)
			// Clock ticks and /proc/uptime are 10 ms steps: allow a few.
			if started.Before(since.Add(-50 * time.Millisecond)) {
				continue
			}
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmdline := strings.ReplaceAll(strings.TrimRight(string(raw), "\x00"), "\x00", " ")
		if !slices.ContainsFunc(markers, func(m string) bool { return m != "" && strings.Contains(cmdline, m) }) {
			continue
		}
		if match != nil {
			environ, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
			if err != nil || !slices.ContainsFunc(strings.Split(string(environ), "\x00"), match) {
				continue
			}
		}
		argv := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if len(argv) > 2 && argv[1] == "-c" && len(argv[2]) > 200 {
			argv[2] = "SCRIPT" // a wrapper's library
		}
		line := strings.Join(argv, " ")
		if len(line) > 160 {
			line = line[:160] + "…"
		}
		out = append(out, strconv.Itoa(pid)+" "+line)
	}
	return out
}

// homeScope matches the environment entries that name h's directories:
// the daemon of h, its local shim and the local commands it starts have
// them in HOME and XDG_RUNTIME_DIR.
func homeScope(h *daemonHome) func(kv string) bool {
	root := filepath.Dir(h.home)
	return func(kv string) bool { return strings.Contains(kv, root) }
}

// chaosNoLeftovers waits up to bound for chaosLeftovers(since, extra...) to
// be empty and fails the test naming what is left.
func chaosNoLeftovers(t *testing.T, since time.Time, bound time.Duration, extra ...string) {
	t.Helper()
	chaosNoLeftoversWhere(t, since, bound, nil, extra...)
}

// chaosNoLeftoversWhere is chaosNoLeftovers for chaosLeftoversWhere.
func chaosNoLeftoversWhere(t *testing.T, since time.Time, bound time.Duration, match func(kv string) bool, extra ...string) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		left := chaosLeftoversWhere(since, match, extra...)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			assert.Fail(t, fmt.Sprintf("chaos: %d processes left running after %s:\n  %s", len(left), bound, strings.Join(left, "\n  ")))
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// bootTime is when the machine booted, to the clock tick: now minus
// /proc/uptime (btime in /proc/stat is whole seconds, too coarse to tell
// a process of this run from one started a moment before it). Zero when
// unreadable.
func bootTime() time.Time {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return time.Time{}
	}
	up, _, _ := strings.Cut(string(b), " ")
	secs, err := strconv.ParseFloat(up, 64)
	if err != nil {
		return time.Time{}
	}
	return time.Now().Add(-time.Duration(secs * float64(time.Second)))
}

// TestChaosLeftoverCheck proves the suite's leftover check sees what it
// must: a process with a test marker started after the mark, only within
// its scope, and nothing of it once it is gone.
func TestChaosLeftoverCheck(t *testing.T) {
	since := time.Now()
	marker := "chaos-selftest-" + strconv.Itoa(os.Getpid())
	scope := "CORRAL_CHAOS_SELFTEST=" + marker
	ours := func(kv string) bool { return kv == scope }
	// GNU sleep adds up its arguments: the marker must not be one, so it
	// travels as the name of a shell that runs sleep.
	cmd := exec.Command("sh", "-c", "sleep 30; :", marker)
	cmd.Env = append(os.Environ(), scope)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if left := chaosLeftoversWhere(since, ours, marker); len(left) != 1 {
		require.FailNow(t, fmt.Sprintf("chaosLeftoversWhere found %d processes with the marker in scope, want 1: %q", len(left), left))
	}
	if left := chaosLeftoversWhere(since, func(string) bool { return false }, marker); len(left) != 0 {
		require.FailNow(t, fmt.Sprintf("chaosLeftoversWhere counted a process out of its scope: %q", left))
	}
	left := chaosLeftoversWhere(time.Now().Add(time.Minute), ours, marker)
	require.Truef(t, len(left) == 0, "chaosLeftoversWhere counted a process started before the mark: %q", left)
	cmd.Process.Kill()
	cmd.Wait()
	chaosNoLeftoversWhere(t, since, 5*time.Second, ours, marker)
}
