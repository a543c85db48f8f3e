package envtest_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
)

// TestStatsFake: one entry per process in order, nil for what is not a
// live tree of this Fake, the figures set, an error for all, and each
// call recorded.
func TestStatsFake(t *testing.T) {
	ctx := fakeCtx(t)
	fe := envtest.NewStatsFake(&envtest.Fake{})
	start := func() *envtest.FakeProcess {
		t.Helper()
		p, err := fe.Start(ctx, env.Spec{Command: "x"})
		require.NoError(t, err)
		return p.(*envtest.FakeProcess)
	}
	set, unset, ended, left, released := start(), start(), start(), start(), start()
	fe.SetStats(set, env.TreeStats{CPU: time.Second, RSS: 10, Pids: 2, Missing: []string{"io"}})
	ended.Exit(env.Exited(0))
	left.SetSurvivors(4242)
	left.Exit(env.Exited(0))
	require.NoError(t, released.Release())
	other := &envtest.Fake{}
	foreign, err := other.Start(ctx, env.Spec{Command: "x"})
	require.NoError(t, err)

	got, err := fe.TreeStats(ctx, []env.Process{set, unset, ended, left, released, foreign})
	require.NoError(t, err)
	require.Len(t, got, 6)
	assert.Equal(t, &env.TreeStats{CPU: time.Second, RSS: 10, Pids: 2, Missing: []string{"io"}}, got[0])
	assert.Equal(t, &env.TreeStats{Pids: 1}, got[1], "no figures set: the live members counted")
	assert.Nil(t, got[2], "a tree that is gone")
	assert.Equal(t, &env.TreeStats{Pids: 1}, got[3], "what the leader left running")
	assert.Nil(t, got[4], "a released handle")
	assert.Nil(t, got[5], "another Fake's process")

	fe.SetStatsError(errors.New("no answer"))
	_, err = fe.TreeStats(ctx, []env.Process{set})
	require.Error(t, err)
	assert.Equal(t, [][]int{{set.PID(), unset.PID(), ended.PID(), left.PID(), released.PID(), 0}, {set.PID()}}, fe.StatsCalls())
}
