package envtest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

// The Limits cases hold every backend to its Capabilities.Limits: what it
// names is enforced (memory over the limit is an OOM kill of that tree,
// a fork bomb stops at the pids limit, a busy loop gets no more than its
// CPUs), and what it does not name is refused, never accepted silently.
var limitCases = []testCase{
	{"Refused", testLimitsRefused},
	{"Memory", testLimitsMemory},
	{"Pids", testLimitsPids},
	{"CPUs", testLimitsCPUs},
}

// enforces skips t unless e enforces the limit name.
func enforces(t *testing.T, e env.Environment, name string) {
	t.Helper()
	if !slices.Contains(e.Capabilities().Limits, name) {
		t.Skipf("%s does not enforce --%s (%s); Refused covers it", e.Name(), name, e.Capabilities().LimitsNote)
	}
}

// testLimitsRefused: a limit the backend does not name is refused with
// ErrUnsupported, saying which limit and why, and nothing runs.
func testLimitsRefused(t *testing.T, s *suite) {
	e := s.newEnv(t)
	caps := e.Capabilities()
	all := env.Limits{Memory: 64 << 20, CPUs: 1, Pids: 64}
	refused := 0
	for _, name := range all.Names() {
		if slices.Contains(caps.Limits, name) {
			continue
		}
		refused++
		var one env.Limits
		switch name {
		case env.LimitMemory:
			one.Memory = all.Memory
		case env.LimitCPUs:
			one.CPUs = all.CPUs
		case env.LimitPids:
			one.Pids = all.Pids
		}
		m := NewMarker()
		s.killMarkedAtCleanup(t, e, m)
		p, err := e.Start(s.ctx(t), env.Spec{Command: "sleep " + m, Limits: &one})
		if err == nil {
			s.reap(t, p)
			t.Fatalf("Start with --%s on a backend whose Capabilities.Limits is %v: accepted; want ErrUnsupported", name, caps.Limits)
		}
		require.ErrorIs(t, err, env.ErrUnsupported, "Start with --%s", name)
		var le *env.LimitError
		require.True(t, errors.As(err, &le), "the refusal is a *env.LimitError: %v", err)
		assert.Contains(t, err.Error(), "--"+name)
		assert.NotEmpty(t, le.Reason, "a refusal says why")
		s.waitProcs(t, e, false, m)
	}
	if refused == 0 {
		t.Logf("%s enforces every limit: nothing to refuse", e.Name())
	}
}

// testLimitsMemory: a tree that allocates 300 MB under a 100M limit is
// killed by the OOM killer and reported so, while a process started
// beside it without a limit runs on.
func testLimitsMemory(t *testing.T, s *suite) {
	e := s.newEnv(t)
	enforces(t, e, env.LimitMemory)
	m := NewMarker()
	s.killMarkedAtCleanup(t, e, m)
	sibling := s.start(t, e, env.Spec{Command: "sleep " + m})
	// Command substitution holds the bytes in the shell itself.
	p := s.start(t, e, env.Spec{Command: `v=$(head -c 300000000 /dev/zero | tr '\0' a); echo "survived ${#v}"`, Limits: &env.Limits{Memory: 100 << 20}})
	out, err := ReadAll(s.ctx(t), p)
	require.NoError(t, err)
	st := s.wait(t, p)
	assert.True(t, st.OOMKilled, "a tree over its memory limit ends by the OOM killer: %v, output %q", st, clip(out))
	assert.NotContains(t, string(out), "survived", "the allocation must not complete under the limit")
	ctx, cancel := context.WithTimeout(s.ctx(t), 200*time.Millisecond)
	defer cancel()
	if st, err := sibling.Wait(ctx); err == nil {
		t.Errorf("the process beside the limited one ended too: %v", st)
	}
}

// testLimitsPids: a shell that starts 100 background sleeps under a
// limit of 50 tasks fails to fork before it gets there; without the limit
// it would wait for all of them.
func testLimitsPids(t *testing.T, s *suite) {
	e := s.newEnv(t)
	enforces(t, e, env.LimitPids)
	m := NewMarker()
	s.killMarkedAtCleanup(t, e, m)
	p := s.start(t, e, env.Spec{Command: `i=0; while [ $i -lt 100 ]; do sleep ` + m + ` & i=$((i+1)); done; echo "forked $i"; wait`, Limits: &env.Limits{Pids: 50}})
	out, err := ReadAll(s.ctx(t), p)
	require.NoError(t, err)
	st := s.wait(t, p)
	assert.NotContains(t, string(out), "forked 100", "100 processes forked under a limit of 50")
	assert.NotEqual(t, 0, st.Code, "the shell fails once it cannot fork: %v, output %q", st, clip(out))
	assert.Contains(t, strings.ToLower(string(out)), "fork", "the shell says it cannot fork: %q", clip(out))
	// The sleeps it did fork are still the tree's: a kill ends them.
	if err := p.Signal(s.ctx(t), env.SIGKILL); err != nil && !errors.Is(err, env.ErrExited) {
		t.Fatalf("Signal(KILL) of what the shell left: %v", err)
	}
	s.waitNoSurvivors(t, p)
	s.waitProcs(t, e, false, m)
}

// testLimitsCPUs: a busy loop held to 0.2 of a core uses no more than
// that (with slack for the sampling), where it would take a whole idle
// core. The bound is an upper one, so a loaded machine cannot fail it.
func testLimitsCPUs(t *testing.T, s *suite) {
	e := s.newEnv(t)
	enforces(t, e, env.LimitCPUs)
	ts, ok := e.(env.TreeStatter)
	if !ok {
		t.Skipf("the Environment (%T) does not implement env.TreeStatter: no CPU time to compare", e)
	}
	p := s.start(t, e, env.Spec{Command: "echo ready; while :; do :; done", Limits: &env.Limits{CPUs: 0.2}})
	s.waitFor(t, s.watch(t, p, 0), "ready")
	first := s.treeStats(t, ts, p)[0]
	start := time.Now()
	select {
	case <-time.After(3 * time.Second):
	case <-s.ctx(t).Done():
	}
	second := s.treeStats(t, ts, p)[0]
	wall := time.Since(start)
	require.NotNil(t, first)
	require.NotNil(t, second)
	share := float64(second.CPU-first.CPU) / float64(wall)
	t.Logf("busy loop under --cpus 0.2: %.3f of a core over %v", share, wall)
	assert.LessOrEqual(t, share, 0.3, "a busy loop under --cpus 0.2 used %.2f of a core", share)
	assert.Positive(t, share, "the loop runs at all")
}
