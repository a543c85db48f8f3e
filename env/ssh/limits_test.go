package ssh

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
	"github.com/corralhq/corral/env/ssh/sshtest"
)

// requireHostLimits skips t, saying why, unless e enforces every limit;
// with CORRAL_REQUIRE_LIMITS=1 it fails instead. The test sshd logs in as
// the user running the tests, so this holds where that user may write
// the cgroup hierarchy (root, as in CI).
func requireHostLimits(t *testing.T, e env.Environment) {
	t.Helper()
	caps := e.Capabilities()
	if len(caps.Limits) == 3 {
		return
	}
	if os.Getenv("CORRAL_REQUIRE_LIMITS") == "1" {
		require.FailNowf(t, "limits required", "CORRAL_REQUIRE_LIMITS=1 but %s enforces %v: %s", e.Name(), caps.Limits, caps.LimitsNote)
	}
	t.Skipf("%s does not enforce per-process limits here (set CORRAL_REQUIRE_LIMITS=1 to fail instead): %s", e.Name(), caps.LimitsNote)
}

// openLimited opens a test sshd's host, closed at cleanup, and skips t
// unless it enforces every limit (see requireHostLimits).
func openLimited(t *testing.T, ctx context.Context) env.Environment {
	t.Helper()
	srv := sshtest.Start(t)
	opts := serverOptions(t, srv)
	opts.BaseDir = t.TempDir() + "/state"
	e, err := Open(ctx, srv.Target(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	requireHostLimits(t, e)
	return e
}

// limitCgroups are the cgroup directories of a limited process: its
// process directory's name under each base the probe reported.
func limitCgroups(t *testing.T, e env.Environment, p env.Process) []string {
	t.Helper()
	ref, err := p.Ref()
	require.NoError(t, err)
	var rd struct {
		Dir string `json:"dir"`
	}
	require.NoError(t, json.Unmarshal(ref.Data, &rd))
	note := e.Capabilities().LimitsNote
	_, where, ok := strings.Cut(note, ", under ")
	require.True(t, ok, "the limits note names where the cgroups go: %q", note)
	var dirs []string
	for _, base := range strings.Fields(where) {
		dirs = append(dirs, filepath.Join(base, filepath.Base(rd.Dir)))
	}
	return dirs
}

// TestLimitsHoldEscapees: a limited tree's cgroup holds what left its
// session and cleared its environment, which neither the process group
// nor the CORRAL_TREE scan finds. Survivors lists it after the leader
// exited, a kill ends it, and the cgroups go with the tree.
func TestLimitsHoldEscapees(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := openLimited(t, ctx)
	m := envtest.NewMarker()
	t.Cleanup(func() { _ = envtest.KillMarked(context.Background(), e, m) })

	p, err := e.Start(ctx, env.Spec{
		Command: "env -i setsid sleep " + m + " </dev/null >/dev/null 2>&1 & echo started",
		Limits:  &env.Limits{Memory: 64 << 20, Pids: 32},
	})
	require.NoError(t, err)
	defer p.Release()
	dirs := limitCgroups(t, e, p)
	for _, d := range dirs {
		assert.DirExists(t, d, "the limit cgroup exists while the tree runs")
	}
	st, err := p.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, st.Code, "the leader exits once it started the escapee")

	var left []int
	require.Eventually(t, func() bool {
		left, err = p.Survivors(ctx)
		return err == nil && len(left) > 0
	}, 10*time.Second, 50*time.Millisecond, "Survivors lists the escapee held by the cgroup (err %v)", err)
	found, err := envtest.ScanProcs(ctx, e, m)
	require.NoError(t, err)
	require.Contains(t, found, m, "the escapee runs")

	if err := p.Signal(ctx, env.SIGKILL); err != nil && !errors.Is(err, env.ErrExited) {
		t.Fatalf("Signal(KILL): %v", err)
	}
	require.Eventually(t, func() bool {
		left, err = p.Survivors(ctx)
		return err == nil && len(left) == 0
	}, 10*time.Second, 50*time.Millisecond, "the kill ends the escapee (left %v, err %v)", left, err)
	found, err = envtest.ScanProcs(ctx, e, m)
	require.NoError(t, err)
	assert.NotContains(t, found, m, "the escapee is gone")
	for _, d := range dirs {
		assert.NoDirExists(t, d, "the limit cgroup goes once the tree is gone")
	}
}

// TestLimitsOOMOfALimitedTree: a host that takes limits says how, and
// one started under them reports an OOM kill as one.
func TestLimitsOOMOfALimitedTree(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e := openLimited(t, ctx)
	caps := e.Capabilities()
	assert.True(t, slices.Equal(caps.Limits, []string{env.LimitMemory, env.LimitCPUs, env.LimitPids}), "limits %v", caps.Limits)
	assert.Contains(t, caps.LimitsNote, "per process tree", "the note says how the limits are enforced")

	p, err := e.Start(ctx, env.Spec{Command: `python3 -c 'b = bytearray(200 << 20); print("survived")'`, Limits: &env.Limits{Memory: 64 << 20}})
	require.NoError(t, err)
	defer p.Release()
	out, err := envtest.ReadAll(ctx, p)
	require.NoError(t, err)
	st, err := p.Wait(ctx)
	require.NoError(t, err)
	assert.True(t, st.OOMKilled, "a 200 MB allocation under 64M is an OOM kill: %v, output %q", st, out)
	assert.NotContains(t, string(out), "survived")
	dirs := limitCgroups(t, e, p)
	require.Eventually(t, func() bool {
		for _, d := range dirs {
			if _, err := os.Stat(d); err == nil {
				return false
			}
		}
		return true
	}, 5*time.Second, 20*time.Millisecond, "the limit cgroups %v go with the tree", dirs)
}
