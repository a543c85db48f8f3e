package envtest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

// The Stats cases run where the Environment implements env.TreeStatter.
// Their bounds are loose on purpose: the machines that run them are
// shared and loaded, and a precise accuracy check belongs to a benchmark.
var statsCases = []testCase{
	{"BusyLoop", testStatsBusyLoop},
	{"Memory", testStatsMemory},
	{"Exited", testStatsExited},
	{"Batch", testStatsBatch},
}

// statter returns a fresh Environment as an env.TreeStatter, or skips.
func (s *suite) statter(t *testing.T) (env.Environment, env.TreeStatter) {
	t.Helper()
	e := s.newEnv(t)
	ts, ok := e.(env.TreeStatter)
	if !ok {
		t.Skipf("the Environment (%T) does not implement env.TreeStatter", e)
	}
	return e, ts
}

// treeStats returns the stats of procs, failing the test on an error or
// a result of the wrong length.
func (s *suite) treeStats(t *testing.T, ts env.TreeStatter, procs ...env.Process) []*env.TreeStats {
	t.Helper()
	got, err := ts.TreeStats(s.ctx(t), procs)
	require.NoError(t, err, "TreeStats")
	require.Len(t, got, len(procs), "TreeStats gives one entry per process")
	return got
}

// startReady starts command, which prints "ready" once it is set up, and
// waits for that line.
func (s *suite) startReady(t *testing.T, e env.Environment, command string) env.Process {
	t.Helper()
	p := s.start(t, e, env.Spec{Command: command})
	s.waitFor(t, s.watch(t, p, 0), "ready")
	return p
}

// testStatsBusyLoop: a shell spinning in a loop gains CPU time between
// two samples, and never more than one core's worth of the time that
// encloses them. How close to a full core it gets depends on the load of
// the machine (a CI run on 2 cores gave it 0.2), so the share itself is a
// benchmark's figure, not this case's.
func testStatsBusyLoop(t *testing.T, s *suite) {
	e, ts := s.statter(t)
	p := s.startReady(t, e, "echo ready; while :; do :; done")
	start := time.Now()
	first := s.treeStats(t, ts, p)[0]
	require.NotNil(t, first, "a running tree")
	select {
	case <-time.After(2 * time.Second):
	case <-s.ctx(t).Done():
	}
	second := s.treeStats(t, ts, p)[0]
	wall := time.Since(start)
	require.NotNil(t, second, "a running tree")
	assert.GreaterOrEqual(t, second.Pids, 1)
	used := second.CPU - first.CPU
	t.Logf("busy loop: %.2f cores over %v (CPU %v → %v)", float64(used)/float64(wall), wall, first.CPU, second.CPU)
	assert.Positive(t, used, "a busy loop's CPU time grows: CPU %v → %v over %v", first.CPU, second.CPU, wall)
	// One clock tick of slack: /proc counts CPU time in ticks.
	assert.LessOrEqual(t, used, wall+20*time.Millisecond, "one busy loop uses at most one core: CPU %v → %v over %v", first.CPU, second.CPU, wall)
}

// testStatsMemory: a shell holding a 64 MiB variable is resident with it.
// Command substitution keeps the bytes in the shell itself, under dash,
// bash and busybox ash alike; the shell then waits for a background sleep,
// since a last command would be exec'd in its place, memory and all. While
// it reads, the shell holds up to twice the bytes, and gives the spare copy
// back a moment later: the case samples until the tree has settled (its
// sleep runs and it holds at most 128 MiB), within the suite's bound.
func testStatsMemory(t *testing.T, s *suite) {
	e, ts := s.statter(t)
	p := s.startReady(t, e, `v=$(head -c 67108864 /dev/zero | tr '\0' a); sleep 600 & echo "ready ${#v}"; wait`)
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	var st *env.TreeStats
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		st = s.treeStats(t, ts, p)[0]
		require.NotNil(t, st, "a running tree")
		if st.Pids >= 2 && st.RSS <= 128<<20 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the tree holding 64 MiB never settled within %v: %+v (want RSS at most 128 MiB, the shell and its sleep)", s.timeout, *st)
		case <-time.After(delay):
		}
	}
	t.Logf("64 MiB shell variable: RSS %d bytes, %d processes", st.RSS, st.Pids)
	assert.GreaterOrEqual(t, st.RSS, int64(48<<20), "RSS of a tree holding 64 MiB")
}

// testStatsExited: a tree that ended, and a process of no Environment
// under test, give nil and no error.
func testStatsExited(t *testing.T, s *suite) {
	e, ts := s.statter(t)
	p := s.start(t, e, env.Spec{Command: "exit 3"})
	require.Equal(t, env.Exited(3), s.wait(t, p))
	// What ran beside the command (a backend's wrapper) may end a moment
	// after the status is known.
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		got := s.treeStats(t, ts, p, foreignProcess{})
		assert.Nil(t, got[1], "a handle of another Environment")
		if got[0] == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("TreeStats of an exited tree still %+v after %v", *got[0], s.timeout)
		case <-time.After(delay):
		}
	}
}

// testStatsBatch: three trees in one call come back in order, each with
// its own processes (as many as its Survivors), and a foreign handle
// among them gets nil.
func testStatsBatch(t *testing.T, s *suite) {
	e, ts := s.statter(t)
	var procs []env.Process
	for _, cmd := range []string{
		"sleep 600 & echo ready; wait",
		"sleep 600 & sleep 600 & echo ready; wait",
		"sleep 600 & sleep 600 & sleep 600 & echo ready; wait",
	} {
		procs = append(procs, s.startReady(t, e, cmd))
	}
	got := s.treeStats(t, ts, procs[0], procs[1], foreignProcess{}, procs[2])
	assert.Nil(t, got[2], "a handle of another Environment")
	got = append(got[:2], got[3])
	for i, st := range got {
		require.NotNil(t, st, "tree %d runs", i)
		survivors, err := procs[i].Survivors(s.ctx(t))
		require.NoError(t, err, "Survivors of tree %d", i)
		assert.Equal(t, len(survivors), st.Pids, "tree %d: TreeStats counts Survivors' processes %v", i, survivors)
		assert.Positive(t, st.RSS, "tree %d", i)
	}
	// Each tree has one sleep more than the one before it.
	assert.Equal(t, got[0].Pids+1, got[1].Pids, "trees 0 and 1: %+v %+v", *got[0], *got[1])
	assert.Equal(t, got[1].Pids+1, got[2].Pids, "trees 1 and 2: %+v %+v", *got[1], *got[2])
}
