package envtest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/shellquote"
	"github.com/stretchr/testify/require"
)

// leftoverCases cover a tree that outlives its leader: `cmd &`, `npm run
// dev`, `compose up -d`. The leader's exit status is the process's, but
// what it left running must stay visible (Survivors), reachable (Signal
// after the exit) and, where output is replayable, heard (Output from an
// offset after the exit).
var leftoverCases = []testCase{
	{"SurvivorsAfterLeaderExit", func(t *testing.T, s *suite) { testLeftoverSurvivors(t, s, false) }},
	{"SurvivorsAfterLeaderExitDetached", func(t *testing.T, s *suite) { testLeftoverSurvivors(t, s, true) }},
	{"OutputAfterLeaderExit", testLeftoverOutput},
}

func testLeftoverSurvivors(t *testing.T, s *suite, detach bool) {
	e := s.newEnv(t)
	if detach && !e.Capabilities().Reattach {
		t.Skip("Capabilities.Reattach is false: no detached processes")
	}
	m := NewMarker()
	s.killMarkedAtCleanup(t, e, m)
	p := s.start(t, e, env.Spec{Detach: detach,
		Command: exportMarkers([]string{m}) + `sleep $M0 >/dev/null 2>&1 & echo hi`})
	require.Equal(t, env.Exited(0), s.wait(t, p), "the leader's status is the process's")
	s.waitProcs(t, e, true, m)
	surv, err := p.Survivors(s.ctx(t))
	require.NoError(t, err)
	require.NotEmpty(t, surv, "Survivors after the leader exited must list the sleep it left running")

	// The leader is gone, so Signal says so; the rest of the tree must
	// still get the signal.
	err = p.Signal(s.ctx(t), env.SIGTERM)
	require.ErrorIs(t, err, env.ErrExited)
	s.waitProcs(t, e, false, m)
	s.waitNoSurvivors(t, p)
	require.Equal(t, env.Exited(0), s.wait(t, p), "signalling the leftovers must not change the leader's status")
}

// testLeftoverOutput: a descendant that writes after the leader exited is
// heard by an Output opened at the offset where the leader's output ended.
func testLeftoverOutput(t *testing.T, s *suite) {
	e := s.newEnv(t)
	caps := e.Capabilities()
	if !caps.ReplayOutput && !caps.Reattach {
		t.Skip("Capabilities.ReplayOutput and Reattach are false: a live stream ends with its grace")
	}
	dir := s.tempDir(t, e)
	m := NewMarker()
	s.killMarkedAtCleanup(t, e, m)
	gate := dir + "/go"
	// The leftover waits for a file the test creates after the leader's
	// exit, so "late" is certainly written after it.
	script := exportMarkers([]string{m}) + `G=` + shellquote.Quote(gate) + `
sh -c 'while [ ! -e "$1" ]; do sleep 0.05; done; echo late; exec sleep "$2"' leftover "$G" "$M0" &
echo early`
	p := s.start(t, e, env.Spec{Command: script, Detach: !caps.ReplayOutput})
	require.Equal(t, env.Exited(0), s.wait(t, p))
	s.waitProcs(t, e, true, m)
	s.sh(t, e, "touch "+shellquote.Quote(gate))

	want := []byte("early\nlate\n")
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	var got []byte
	for delay := 20 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		var err error
		got, err = ReadAll(ctx, p)
		require.NoError(t, err)
		if bytes.Equal(got, want) {
			break
		}
		require.True(t, bytes.HasPrefix(want, got), "output %q is not a prefix of %q", got, want)
		select {
		case <-ctx.Done():
			t.Fatalf("output after the leader exited never arrived: have %q, want %q", got, want)
		case <-time.After(delay):
		}
	}
	from, err := ReadFrom(ctx, p, int64(len("early\n")))
	require.NoError(t, err)
	require.Equal(t, "late\n", string(from), "Output from the leader's end offset")

	err = p.Signal(s.ctx(t), env.SIGKILL)
	if err != nil && !errors.Is(err, env.ErrExited) {
		require.NoError(t, err)
	}
	s.waitProcs(t, e, false, m)
	s.waitNoSurvivors(t, p)
}
