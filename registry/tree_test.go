package registry

import (
	"context"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startLeaving starts a background command whose leader exits at once and
// leaves `sleep m` running, and waits until the registry counts it.
func startLeaving(t *testing.T, r *Registry, m string) Info {
	t.Helper()
	ctx := context.Background()
	in, err := r.Start(ctx, StartOptions{Command: "sleep " + m + " & echo hi"})
	require.NoError(t, err)
	got, err := r.Wait(ctx, in.ID, generous)
	require.NoError(t, err, "Wait returns when the leader exits")
	require.Equal(t, StateExited, got.State)
	require.Equal(t, env.Exited(0), *got.Status, "the leader's status is the process's")
	require.Eventually(t, func() bool {
		in, err := r.Get(t.Context(), in.ID)
		return err == nil && in.Leftover == 1
	}, generous, 5*time.Millisecond, "the sleep the leader left running must be counted")
	// Counted from its fork on; its exec of sleep may come a moment later.
	require.Eventually(t, func() bool { return len(sleepers(m)) == 1 }, generous, 5*time.Millisecond)
	return got
}

func TestLeftoversKeepTheProcessOpen(t *testing.T) {
	r := newLocal(t, nil)
	ctx := context.Background()
	m := marker()
	in := startLeaving(t, r, m)

	got, err := r.Get(t.Context(), in.ID)
	require.NoError(t, err)
	assert.True(t, got.TreeRunning)
	assert.Equal(t, StateExited, got.State)

	// Listed by default (something of it runs) and by KillAll's selection.
	ids := func(list []Info) []string {
		var out []string
		for _, in := range list {
			out = append(out, in.ID)
		}
		return out
	}
	assert.Contains(t, ids(listed(t, r, ListOptions{})), in.ID, "ps must show a process whose tree still runs")

	// WaitTree does not return while the sleep lives.
	_, err = r.WaitTree(ctx, in.ID, 200*time.Millisecond)
	require.ErrorIs(t, err, ErrWaitTimeout)
	assert.Contains(t, err.Error(), "1 left running")

	// Remove refuses, and says what to do.
	err = r.Remove(ctx, in.ID)
	require.ErrorIs(t, err, ErrRunning)
	assert.Contains(t, err.Error(), "1 processes of its tree still run")
	assert.NotContains(t, err.Error(), "corral ", "the front ends name their own commands")
	require.NotEmpty(t, sleepers(m), "a refused Remove must not touch the tree")

	// Kill ends the leftovers and reports them; the leader's status stays.
	res, err := r.Kill(ctx, in.ID, KillOptions{})
	require.NoError(t, err)
	assert.True(t, res.AlreadyExited)
	assert.Equal(t, env.SIGTERM, res.Signal)
	assert.Equal(t, 1, res.Ended, "the kill ended the one leftover")
	assert.Equal(t, env.Exited(0), *res.Status)
	assert.Empty(t, sleepers(m))

	done, err := r.WaitTree(ctx, in.ID, generous)
	require.NoError(t, err)
	assert.False(t, done.TreeRunning)
	assert.Zero(t, done.Leftover)
	assert.Equal(t, StateExited, done.State)
	assert.NotContains(t, ids(listed(t, r, ListOptions{})), in.ID)
	require.NoError(t, r.Remove(ctx, in.ID))
}

func TestKillAllAndRemoveForceReachLeftovers(t *testing.T) {
	r := newLocal(t, nil)
	ctx := context.Background()
	m1, m2 := marker(), marker()
	a := startLeaving(t, r, m1)
	b := startLeaving(t, r, m2)

	res, err := r.KillAll(ctx, KillAllOptions{Grace: time.Second})
	require.NoError(t, err)
	var killed []string
	for _, k := range res {
		if k.Ended > 0 {
			killed = append(killed, k.ID)
		}
	}
	assert.ElementsMatch(t, []string{a.ID, b.ID}, killed, "kill --all includes processes whose leader exited")
	assert.Empty(t, sleepers(m1))
	assert.Empty(t, sleepers(m2))

	m3 := marker()
	c := startLeaving(t, r, m3)
	require.NoError(t, r.RemoveForce(ctx, c.ID))
	assert.Empty(t, sleepers(m3), "remove --force kills the tree first")
	_, err = r.Get(t.Context(), c.ID)
	require.ErrorIs(t, err, ErrNotFound)
}

func TestLeftoverOutputKeepsArriving(t *testing.T) {
	r := newLocal(t, nil)
	ctx := context.Background()
	gate := t.TempDir() + "/go"
	in, err := r.Start(ctx, StartOptions{
		Command: `(while [ ! -e "$G" ]; do sleep 0.02; done; echo late) & echo early`,
		Env:     []string{"G=" + gate},
	})
	require.NoError(t, err)
	_, err = r.Wait(ctx, in.ID, generous)
	require.NoError(t, err)
	touch(t, gate)
	done, err := r.WaitTree(ctx, in.ID, generous)
	require.NoError(t, err)
	pr, err := r.Poll(ctx, in.ID, 0)
	require.NoError(t, err)
	assert.Equal(t, "early\nlate\n", string(pr.Output), "what the leftover wrote after the leader exited is in the log")
	assert.Equal(t, int64(len("early\nlate\n")), done.OutputBytes)
}

// TestKillReportsEscalationOfTheWholeTree: the leader dies of TERM, two
// processes ignore it; SIGKILL reaching them is an escalation.
func TestKillReportsEscalationOfTheWholeTree(t *testing.T) {
	r := newLocal(t, nil)
	ctx := context.Background()
	m := marker()
	in, err := r.Start(ctx, StartOptions{Command: `sh -c 'trap "" TERM; sleep ` + m + `; :'`})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(sleepers(m)) == 1 }, generous, 5*time.Millisecond)

	res, err := r.Kill(ctx, in.ID, KillOptions{Grace: 300 * time.Millisecond})
	require.NoError(t, err)
	assert.True(t, res.Escalated, "SIGKILL was needed for the TERM-ignoring processes: %+v", res)
	assert.Equal(t, 3, res.Ended, "outer sh, inner sh and sleep: %+v", res)
	assert.Equal(t, StateKilled, res.State)
	assert.Empty(t, res.Survivors)
	assert.Empty(t, sleepers(m))
}

func TestKillWithoutEscalation(t *testing.T) {
	r := newLocal(t, nil)
	ctx := context.Background()

	t.Run("HUP reloads and the process keeps running", func(t *testing.T) {
		skipIfHUPIgnored(t)
		in, err := r.Start(ctx, StartOptions{Command: `trap 'echo reloaded' HUP; echo ready; while :; do sleep 0.05; done`})
		require.NoError(t, err)
		waitOutput(t, r, in.ID, "ready\n")
		res, err := r.Kill(ctx, in.ID, KillOptions{Signal: env.SIGHUP, Grace: 300 * time.Millisecond, Escalate: new(false)})
		require.NoError(t, err)
		assert.True(t, res.StillRunning)
		assert.False(t, res.Escalated)
		assert.Equal(t, env.SIGHUP, res.Signal)
		assert.Equal(t, StateRunning, res.State)
		waitOutput(t, r, in.ID, "reloaded\n")

		// Its later end is its own, not a kill.
		_, err = r.Kill(ctx, in.ID, KillOptions{Force: true})
		require.NoError(t, err)
	})

	t.Run("INT that ends within the grace", func(t *testing.T) {
		in, err := r.Start(ctx, StartOptions{Command: `trap 'echo bye; exit 5' INT; echo ready; while :; do sleep 0.05; done`})
		require.NoError(t, err)
		waitOutput(t, r, in.ID, "ready\n")
		res, err := r.Kill(ctx, in.ID, KillOptions{Signal: env.SIGINT, Grace: generous, Escalate: new(false)})
		require.NoError(t, err)
		assert.False(t, res.StillRunning)
		assert.False(t, res.Escalated)
		assert.Equal(t, StateKilled, res.State)
		assert.Equal(t, env.Exited(5), *res.Status, "the trap's exit code")
		assert.GreaterOrEqual(t, res.Ended, 1)
	})

	t.Run("a signal the process ignores", func(t *testing.T) {
		m := marker()
		in, err := r.Start(ctx, StartOptions{Command: `trap '' TERM; sleep ` + m})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return len(sleepers(m)) == 1 }, generous, 5*time.Millisecond)
		res, err := r.Kill(ctx, in.ID, KillOptions{Grace: 200 * time.Millisecond, Escalate: new(false)})
		require.NoError(t, err)
		assert.True(t, res.StillRunning)
		assert.False(t, res.Escalated)
		assert.Equal(t, 0, res.Ended)
		require.NotEmpty(t, sleepers(m), "no SIGKILL without escalation")
		got, err := r.Get(t.Context(), in.ID)
		require.NoError(t, err)
		assert.Equal(t, StateRunning, got.State)
	})

	in, err := r.Start(ctx, StartOptions{Command: "sleep 60"})
	require.NoError(t, err)
	_, err = r.Kill(ctx, in.ID, KillOptions{Force: true, Escalate: new(false)})
	require.ErrorIs(t, err, ErrInvalidOptions, "force and no-escalate contradict each other")
	got, err := r.Get(t.Context(), in.ID)
	require.NoError(t, err)
	assert.Equal(t, StateRunning, got.State, "a rejected kill sends nothing")
}

// TestRunTimeoutReportsTheKill: Run's result carries the kill's facts.
func TestRunTimeoutReportsTheKill(t *testing.T) {
	r := newLocal(t, nil)
	m := marker()
	res, err := r.Run(context.Background(), RunOptions{
		StartOptions: StartOptions{Command: `trap "" TERM; sleep ` + m},
		Timeout:      100 * time.Millisecond,
		Grace:        200 * time.Millisecond,
	})
	require.NoError(t, err)
	assert.Equal(t, StateTimedOut, res.State)
	require.NotNil(t, res.Kill)
	assert.True(t, res.Kill.Escalated)
	assert.Equal(t, 2, res.Kill.Ended, "sh and sleep")
	assert.Empty(t, sleepers(m))
}

func waitOutput(t *testing.T, r *Registry, id, want string) {
	t.Helper()
	require.Eventually(t, func() bool {
		pr, err := r.Poll(context.Background(), id, 0)
		return err == nil && strings.Contains(string(pr.Output), want)
	}, generous, 5*time.Millisecond, "output %q never arrived", want)
}

func touch(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, nil, 0o600))
}

func TestResize(t *testing.T) {
	r := newLocal(t, nil)
	ctx := context.Background()
	in, err := r.Start(ctx, StartOptions{PTY: &env.WindowSize{Rows: 24, Cols: 80},
		Command: `trap 'stty size' WINCH; stty size; while :; do sleep 0.05; done`})
	require.NoError(t, err)
	waitOutput(t, r, in.ID, "24 80")
	require.NoError(t, r.Resize(ctx, in.ID, env.WindowSize{Rows: 40, Cols: 120}))
	waitOutput(t, r, in.ID, "40 120")

	require.ErrorIs(t, r.Resize(ctx, in.ID, env.WindowSize{Rows: 0, Cols: 120}), ErrInvalidOptions)
	plain, err := r.Start(ctx, StartOptions{Command: "sleep 60"})
	require.NoError(t, err)
	require.ErrorIs(t, r.Resize(ctx, plain.ID, env.WindowSize{Rows: 40, Cols: 120}), ErrInvalidOptions)
	_, err = r.Kill(ctx, in.ID, KillOptions{Force: true})
	require.NoError(t, err)
	require.ErrorIs(t, r.Resize(ctx, in.ID, env.WindowSize{Rows: 40, Cols: 120}), ErrNotRunning)
}

// skipIfHUPIgnored skips a test whose shell traps HUP when this test
// process was started with HUP ignored (under nohup): commands inherit
// that, and POSIX has a shell ignore a trap of a signal it was started
// with ignored.
func skipIfHUPIgnored(t *testing.T) {
	t.Helper()
	if signal.Ignored(syscall.SIGHUP) {
		t.Skip("SIGHUP is ignored by this test's parent (run under nohup?), and commands inherit that: a shell cannot trap it")
	}
}
