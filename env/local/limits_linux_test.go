package local

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

// requireLimits skips unless this host lets corral enforce every limit.
func requireLimits(t *testing.T, e *Env) {
	t.Helper()
	if got := e.Capabilities().Limits; len(got) != 3 {
		if os.Getenv("CORRAL_REQUIRE_LIMITS") == "1" {
			t.Fatalf("CORRAL_REQUIRE_LIMITS=1 but this host enforces %v of the limits: %s", got, e.Capabilities().LimitsNote)
		}
		t.Skipf("this host enforces %v of the limits (set CORRAL_REQUIRE_LIMITS=1 to fail instead): %s", got, e.Capabilities().LimitsNote)
	}
}

// limitedThreads lists the threads of this process that sit in one of
// corral's per-process cgroups: a thread that forked a limited command and
// came back to serve other goroutines would put everything it forks next
// under that command's limits.
func limitedThreads(t *testing.T) []string {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/cgroup")
	require.NoError(t, err)
	var bad []string
	for _, f := range tasks {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		for line := range strings.SplitSeq(string(data), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) == 3 && parts[1] != "" && strings.Contains(parts[2], "/corral/") {
				bad = append(bad, f+": "+line)
			}
		}
	}
	return bad
}

// TestLimitsLeaveNoThreadBehind: after many limited starts, attached and
// detached, no thread of the supervisor is left in a limited cgroup, and
// every limited cgroup is removed once its tree ended.
func TestLimitsLeaveNoThreadBehind(t *testing.T) {
	e := newTestEnv(t, false)
	requireLimits(t, e)
	lim := &env.Limits{Memory: 64 << 20, CPUs: 0.5, Pids: 20}
	var ids []string
	for i := range 20 {
		p := start(t, e, env.Spec{Command: "exit 3", Limits: lim, Detach: i%2 == 1})
		st, err := p.Wait(testCtx(t))
		require.NoError(t, err)
		assert.Equal(t, env.Exited(3), st)
		switch p := p.(type) {
		case *detached:
			ids = append(ids, p.id)
		case *child:
			for _, dir := range p.limits.v1 {
				ids = append(ids, filepath.Base(dir))
			}
		}
	}
	assert.Empty(t, limitedThreads(t), "threads of the supervisor left in a limited cgroup")
	ls := e.sys.limits
	deadline := time.Now().Add(10 * time.Second)
	for _, base := range ls.v1 {
		for _, id := range ids {
			dir := filepath.Join(base, id)
			for fileExists(dir) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			assert.NoFileExists(t, dir, "the limited cgroup of an ended tree")
		}
	}
}

// TestLimitsDetachedOOM: a detached process (run by the shim server)
// over its memory limit is OOM-killed and reported so.
func TestLimitsDetachedOOM(t *testing.T) {
	e := newTestEnv(t, false)
	requireLimits(t, e)
	p := start(t, e, env.Spec{Command: `v=$(head -c 300000000 /dev/zero | tr '\0' a); echo "survived ${#v}"`, Detach: true, Limits: &env.Limits{Memory: 100 << 20}})
	st, err := p.Wait(testCtx(t))
	require.NoError(t, err)
	assert.True(t, st.OOMKilled, "status %v", st)
	assert.NotContains(t, readAll(t, p, 0), "survived")
}
