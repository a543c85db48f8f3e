package registry

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
)

var oomStatus = env.ExitStatus{Code: -1, Signal: env.SIGKILL, OOMKilled: true}

// TestOOMKilledReasonAndEvent: a process the backend reports OOM-killed is
// exited with the reason "out of memory", its status says so, and an
// oom_killed event (with the output's tail) comes just before its exited
// event. A plain SIGKILL is no such thing, and neither is the end of a
// process that a kill of ours signalled, whatever the backend saw in the
// cgroup meanwhile.
func TestOOMKilledReasonAndEvent(t *testing.T) {
	fe := &envtest.Fake{}
	r, err := New(Config{
		Open:         func(context.Context, string) (env.Environment, error) { return fe, nil },
		DefaultGrace: 50 * time.Millisecond,
		Logger:       slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, r.Close()) })
	sub := r.Subscribe()
	defer sub.Close()
	ctx := t.Context()

	hog, err := r.Start(ctx, StartOptions{Command: "./build-index", Name: "indexer"})
	require.NoError(t, err)
	fp := fe.Last()
	fp.WriteOutput("indexing 1/3\nindexing 2/3\n")
	fp.Exit(oomStatus)
	ev := nextOf(t, sub, EventOOMKilled, hog.ID)
	assert.Equal(t, StateExited, ev.State)
	assert.Equal(t, &oomStatus, ev.Status)
	assert.True(t, ev.Notify)
	assert.Equal(t, "indexing 1/3\nindexing 2/3", ev.Tail)
	assert.Equal(t, hog.ID+" (indexer) ran out of memory: the kernel's OOM killer ended it (killed by SIGKILL); raise its memory limit or make it use less: ./build-index", ev.Summary)
	assert.Contains(t, ev.Summary, "raise its memory limit")
	next, err := sub.Next(ctx)
	require.NoError(t, err)
	assert.Equal(t, EventExited, next.Type, "the exited event follows")
	assert.Contains(t, next.Summary, "killed by SIGKILL, out of memory")
	in, err := r.Wait(ctx, hog.ID, 0)
	require.NoError(t, err)
	assert.Equal(t, StateExited, in.State)
	assert.Equal(t, ReasonOutOfMemory, in.Reason)
	assert.Equal(t, "out of memory", in.Reason)
	require.NotNil(t, in.Status)
	assert.True(t, in.Status.OOMKilled)
	assert.Equal(t, "exited (SIGKILL, out of memory)", in.StateText())

	plain, err := r.Start(ctx, StartOptions{Command: "sleep 60"})
	require.NoError(t, err)
	fe.Last().Exit(env.Signaled(env.SIGKILL))
	in, err = r.Wait(ctx, plain.ID, 0)
	require.NoError(t, err)
	assert.Empty(t, in.Reason)
	assert.Equal(t, "exited (SIGKILL)", in.StateText())

	// The backend saw an OOM kill in the cgroup while our kill was under
	// way: the process is killed, by us.
	ours, err := r.Start(ctx, StartOptions{Command: "sleep 60"})
	require.NoError(t, err)
	fe.Last().Trap(env.SIGTERM, oomStatus)
	_, err = r.Kill(ctx, ours.ID, KillOptions{})
	require.NoError(t, err)
	in, err = r.Wait(ctx, ours.ID, 0)
	require.NoError(t, err)
	assert.Equal(t, StateKilled, in.State)
	assert.Empty(t, in.Reason)
	require.NotNil(t, in.Status)
	assert.False(t, in.Status.OOMKilled)

	for {
		c, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		ev, err := sub.Next(c)
		cancel()
		if err != nil {
			break
		}
		assert.NotEqual(t, EventOOMKilled, ev.Type, "%s: %s", ev.ID, ev.Summary)
	}
}

// TestOOMKilledBypassesGlobalRateLimit: an oom_killed event, at most one
// per process, arrives during a cooldown and is not counted.
func TestOOMKilledBypassesGlobalRateLimit(t *testing.T) {
	b := newEventBus(slog.New(slog.DiscardHandler), 1024)
	defer b.close()
	sub := b.subscribe()
	defer sub.Close()
	for range GlobalEventMax + 3 {
		b.publish(Event{Type: EventWatchMatch, ID: "proc_000000000001"})
	}
	b.publish(Event{Type: EventOOMKilled, ID: "proc_000000000002"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var last Event
	for range GlobalEventMax + 1 {
		ev, err := sub.Next(ctx)
		require.NoError(t, err)
		last = ev
	}
	assert.Equal(t, EventOOMKilled, last.Type)
}

// TestOOMReasonNamesTheLimit: an OOM kill names the memory limit the
// process ran under: its own, else its sandbox's; the oom_killed event
// says it too.
func TestOOMReasonNamesTheLimit(t *testing.T) {
	fe := &envtest.Fake{Caps: env.Capabilities{Limits: []string{env.LimitMemory}, SandboxLimits: &env.Limits{Memory: 512 << 20}}}
	r, err := New(Config{
		Open:   func(context.Context, string) (env.Environment, error) { return fe, nil },
		Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, r.Close()) })
	sub := r.Subscribe()
	defer sub.Close()
	ctx := t.Context()
	for _, tc := range []struct {
		limits *env.Limits
		want   string
	}{
		{&env.Limits{Memory: 100 << 20}, "out of memory (limit 100M)"},
		{nil, "out of memory (sandbox limit 512M)"},
	} {
		in, err := r.Start(ctx, StartOptions{Command: "./hog", Limits: tc.limits})
		require.NoError(t, err)
		fe.Last().Exit(oomStatus)
		ev := nextOf(t, sub, EventOOMKilled, in.ID)
		assert.Contains(t, ev.Summary, "ran "+tc.want+":")
		done, err := r.Wait(ctx, in.ID, 0)
		require.NoError(t, err)
		assert.Equal(t, tc.want, done.Reason)
		assert.True(t, IsOutOfMemory(done.Reason))
	}
	assert.False(t, IsOutOfMemory("out of memoryx"))
}
