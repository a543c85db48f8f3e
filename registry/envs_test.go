package registry

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
)

// connected is an environment that holds a connection.
type connected struct {
	*envtest.Fake
	since time.Time
}

func (c connected) ConnStatus() env.ConnStatus {
	return env.ConnStatus{State: env.ConnConnected, Since: c.since, InUse: 1}
}

func TestBackendsListsOpenEnvironments(t *testing.T) {
	since := time.Now().Add(-time.Minute)
	remote := newFakeEnv()
	remote.Caps.Limits, remote.Caps.LimitsNote = []string{env.LimitMemory}, "no cpu controller"
	f := newFixture(t, func(cfg *Config) {
		open := cfg.Open
		cfg.Open = func(ctx context.Context, target string) (env.Environment, error) {
			if target == "remote" {
				return connected{remote, since}, nil
			}
			return open(ctx, target)
		}
	})
	require.Empty(t, f.r.Backends(), "nothing opened yet")

	f.start(StartOptions{Backend: "fake"})
	done, p := f.start(StartOptions{Backend: "fake"})
	p.Exit(env.Exited(0))
	in, err := f.r.Wait(ctxT(t), done.ID, 0)
	require.NoError(t, err)
	require.True(t, in.State.Final())
	_, err = f.r.Start(ctxT(t), StartOptions{Backend: "remote", Command: "remote command"})
	require.NoError(t, err)
	_, err = f.r.Start(ctxT(t), StartOptions{Backend: "nowhere", Command: "x"})
	require.Error(t, err, "a target that cannot be opened")

	bs := f.r.Backends()
	require.Len(t, bs, 2, "%+v", bs)
	require.Equal(t, "fake", bs[0].Target)
	require.Equal(t, "fake", bs[0].Name)
	require.Equal(t, 2, bs[0].Tracked)
	require.Equal(t, 1, bs[0].Running)
	require.Nil(t, bs[0].Conn, "an environment without a connection reports none")
	require.False(t, bs[0].OpenedAt.IsZero())

	require.Equal(t, "remote", bs[1].Target)
	require.Equal(t, 1, bs[1].Tracked)
	require.Equal(t, 1, bs[1].Running)
	require.NotNil(t, bs[1].Conn)
	require.Equal(t, env.ConnConnected, bs[1].Conn.State)
	require.True(t, bs[1].Conn.Since.Equal(since))
	require.Equal(t, []string{env.LimitMemory}, bs[1].Limits, "the limits it enforces, for corral doctor")
	require.Equal(t, "no cpu controller", bs[1].LimitsNote)
	require.Empty(t, bs[0].Limits)
}

// TestSandboxGoneReopens: a sandbox that vanishes under its processes
// (their output and wait fail with env.ErrSandboxGone) makes them lost
// with that reason, lists the target as gone, closes the old environment,
// and the next start opens the target again; a start that is first to
// find the sandbox gone opens it again and runs. A late error from the
// old environment never evicts the new one.
func TestSandboxGoneReopens(t *testing.T) {
	var mu sync.Mutex
	var opened []*envtest.Fake
	f := newFixture(t, func(cfg *Config) {
		open := cfg.Open
		cfg.Open = func(ctx context.Context, target string) (env.Environment, error) {
			if target != "box" {
				return open(ctx, target)
			}
			mu.Lock()
			defer mu.Unlock()
			fe := newFakeEnv()
			opened = append(opened, fe)
			return fe, nil
		}
	})
	opens := func() []*envtest.Fake {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(opened)
	}
	gone := fmt.Errorf("docker: exec in corral-1: container removed: %w", env.ErrSandboxGone)

	var ids []string
	for range 2 {
		in, err := f.r.Start(ctxT(t), StartOptions{Backend: "box", Command: "sleep 1000"})
		require.NoError(t, err)
		ids = append(ids, in.ID)
	}
	first := opens()[0]
	first.OnStart = func(*envtest.FakeProcess) error { return gone }
	for _, p := range first.Procs() {
		p.Lose(gone)
	}
	for _, id := range ids {
		in, err := f.r.Wait(ctxT(t), id, 0)
		require.NoError(t, err)
		require.Equal(t, StateLost, in.State)
		require.Contains(t, in.Reason, "container removed", "a lost process says why")
	}
	require.Eventually(t, first.Closed, generous, poll, "the old environment is closed once its processes are lost")
	bs := f.r.Backends()
	require.Len(t, bs, 1, "%+v", bs)
	require.Equal(t, "box", bs[0].Target)
	require.Equal(t, env.ConditionGone, bs[0].Health.Condition, "the target is listed as gone until it is opened again")
	require.Contains(t, bs[0].Health.Detail, "container removed")
	require.Equal(t, 2, bs[0].Tracked)
	require.Zero(t, bs[0].Running)

	in, err := f.r.Start(ctxT(t), StartOptions{Backend: "box", Command: "echo again"})
	require.NoError(t, err, "the next start opens the target again")
	require.Len(t, opens(), 2)
	second := opens()[1]
	second.Last().Exit(env.Exited(0))
	_, err = f.r.Wait(ctxT(t), in.ID, 0)
	require.NoError(t, err)
	bs = f.r.Backends()
	require.Len(t, bs, 1)
	require.NotEqual(t, env.ConditionGone, bs[0].Health.Condition, "opened again: not gone any more")

	// A late error of the old environment leaves the new one alone.
	require.True(t, f.r.envGone("box", first, gone))
	_, err = f.r.Start(ctxT(t), StartOptions{Backend: "box", Command: "x"})
	require.NoError(t, err)
	require.Len(t, opens(), 2, "a late error from the old sandbox evicted the new one")

	// The sandbox vanishes with nothing running: the start that finds out
	// opens the target again and runs there, in one call.
	second.OnStart = func(*envtest.FakeProcess) error { return gone }
	in, err = f.r.Start(ctxT(t), StartOptions{Backend: "box", Command: "after"})
	require.NoError(t, err, "a start that finds the sandbox gone opens it again")
	require.Len(t, opens(), 3)
	require.Equal(t, "after", opens()[2].Last().Spec().Command)
	require.Equal(t, StateRunning, in.State)

	// Errors that do not say the sandbox is gone evict nothing.
	third := opens()[2]
	third.OnStart = func(*envtest.FakeProcess) error { return fmt.Errorf("busy: %w", env.ErrUnavailable) }
	_, err = f.r.Start(ctxT(t), StartOptions{Backend: "box", Command: "busy"})
	require.ErrorIs(t, err, env.ErrUnavailable)
	require.Len(t, opens(), 3)
}
