package envtest

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/corralhq/corral/env"
	"github.com/stretchr/testify/require"
)

// signalCases check that a command starts the way a shell started by hand
// would: no signal ignored or blocked by whatever supervises it, so that
// traps fire, `yes | head` ends quietly on SIGPIPE and an INT can end it.
var signalCases = []testCase{
	{"DefaultDispositions", func(t *testing.T, s *suite) { testDefaultDispositions(t, s, false) }},
	{"DefaultDispositionsDetached", func(t *testing.T, s *suite) { testDefaultDispositions(t, s, true) }},
	{"BrokenPipeIsQuiet", testBrokenPipeIsQuiet},
	{"TrapINTRuns", testTrapINTRuns},
}

// SignalMasks are a process's ignored and blocked signal sets, as
// /proc/PID/status shows them (SigIgn, SigBlk), bit N-1 standing for
// signal N.
type SignalMasks struct {
	Ignored uint64
	Blocked uint64
}

// masksScript prints the SigIgn and SigBlk lines of a program the
// command's shell execs: what a command passes on is what matters, and a
// shell's own view would mislead (bash and busybox ash mark SIGQUIT
// ignored in themselves, and undo that for what they exec).
const masksScript = `exec grep -E '^Sig(Ign|Blk):' /proc/self/status`

// ParseSignalMasks reads the SigIgn and SigBlk lines of /proc/PID/status
// text.
func ParseSignalMasks(status string) (SignalMasks, error) {
	var m SignalMasks
	var seen int
	for _, line := range strings.Split(status, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		var dst *uint64
		switch k {
		case "SigIgn":
			dst = &m.Ignored
		case "SigBlk":
			dst = &m.Blocked
		default:
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return m, fmt.Errorf("%s: %q is not a hex mask: %w", k, v, err)
		}
		*dst = n
		seen++
	}
	if seen != 2 {
		return m, fmt.Errorf("no SigIgn and SigBlk lines in %q", status)
	}
	return m, nil
}

// signalNames lists the signals set in mask, for messages.
func signalNames(mask uint64) string {
	var names []string
	for n := 1; n <= 64; n++ {
		if mask&(1<<(n-1)) == 0 {
			continue
		}
		if sig := env.SignalFromNumber(n); sig != "" {
			names = append(names, string(sig))
		} else {
			names = append(names, strconv.Itoa(n))
		}
	}
	return strings.Join(names, ",")
}

// LocalSignalBaseline is a Config.SignalBaseline for backends whose
// commands run on the test's own machine: the sets of a plain sh -c that
// the test process starts with os/exec.
func LocalSignalBaseline(t *testing.T) SignalMasks {
	t.Helper()
	out, err := exec.Command("/bin/sh", "-c", masksScript).Output()
	require.NoError(t, err, "running a plain sh -c for the signal baseline")
	m, err := ParseSignalMasks(string(out))
	require.NoError(t, err)
	return m
}

func testDefaultDispositions(t *testing.T, s *suite, detach bool) {
	e := s.newEnv(t)
	if detach && !e.Capabilities().Reattach {
		t.Skip("Capabilities.Reattach is false: no detached processes")
	}
	out, st := s.run(t, e, env.Spec{Command: masksScript, Detach: detach})
	require.True(t, st.Success(), "status %v, output %q", st, out)
	got, err := ParseSignalMasks(string(out))
	require.NoError(t, err)
	var want SignalMasks
	if s.cfg.SignalBaseline != nil {
		want = s.cfg.SignalBaseline(t)
	}
	// Allowed: what a plain shell started by the test has too. Anything
	// more was added by the backend on the way to the command.
	if extra := got.Ignored &^ want.Ignored; extra != 0 {
		t.Errorf("the command ignores %s (SigIgn %016x), which a plain sh -c does not (%016x): "+
			"a supervisor or shim passed SIG_IGN on", signalNames(extra), got.Ignored, want.Ignored)
	}
	if extra := got.Blocked &^ want.Blocked; extra != 0 {
		t.Errorf("the command blocks %s (SigBlk %016x), which a plain sh -c does not (%016x)",
			signalNames(extra), got.Blocked, want.Blocked)
	}
}

// testBrokenPipeIsQuiet: yes ends by SIGPIPE when head is done, as in a
// terminal, instead of reporting a write error.
func testBrokenPipeIsQuiet(t *testing.T, s *suite) {
	e := s.newEnv(t)
	for _, detach := range []bool{false, true} {
		if detach && !e.Capabilities().Reattach {
			continue
		}
		out, st := s.run(t, e, env.Spec{Command: "yes | head -n 1", Detach: detach})
		require.Equal(t, env.Exited(0), st, "detach=%v output %q", detach, out)
		require.Equal(t, "y\n", string(out), "detach=%v: yes must die of SIGPIPE quietly", detach)
	}
}

// testTrapINTRuns: an INT sent through Signal reaches a shell that traps
// it, the trap runs and decides the exit code.
func testTrapINTRuns(t *testing.T, s *suite) {
	e := s.newEnv(t)
	for _, detach := range []bool{false, true} {
		if detach && !e.Capabilities().Reattach {
			continue
		}
		m := NewMarker()
		s.killMarkedAtCleanup(t, e, m)
		p := s.start(t, e, env.Spec{Detach: detach,
			Command: exportMarkers([]string{m}) + `trap 'echo trapped; exit 7' INT; echo ready; while :; do sleep $M0; done`})
		w := s.watch(t, p, 0)
		s.waitFor(t, w, "ready\n")
		s.waitProcs(t, e, true, m)
		require.NoError(t, p.Signal(s.ctx(t), env.SIGINT))
		require.Equal(t, env.Exited(7), s.wait(t, p), "detach=%v: the INT trap must decide the status", detach)
		require.Equal(t, "ready\ntrapped\n", string(s.waitEOF(t, w)), "detach=%v", detach)
		s.waitProcs(t, e, false, m)
	}
}
