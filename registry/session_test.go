package registry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startIn starts `sleep MARKER` twice (a tree of a shell and two sleeps)
// in session id ("" for none).
func startIn(t *testing.T, r *Registry, session, m string) Info {
	t.Helper()
	in, err := r.Start(ctxT(t), StartOptions{Command: "sleep " + m + " & sleep " + m + "; wait", Session: session})
	require.NoError(t, err)
	require.Equal(t, session, in.Session)
	require.Eventually(t, func() bool { return len(sleepers(m)) == 2 }, generous, poll, "waiting for the tree")
	return in
}

func awaitFinal(t *testing.T, r *Registry, id string) Info {
	t.Helper()
	var got Info
	require.Eventually(t, func() bool {
		var err error
		got, err = r.Get(t.Context(), id)
		return err == nil && got.State.Final() && !got.TreeRunning
	}, generous, poll, "waiting for %s to end", id)
	return got
}

// End kills the trees of the session's processes, and only theirs, and
// closes the session to later starts.
func TestSessionEndKillsItsProcesses(t *testing.T) {
	r := newLocal(t, nil)
	lease, err := r.OpenSession(ctxT(t), SessionOptions{})
	require.NoError(t, err)
	require.True(t, ValidSessionID(lease.ID()), "ID %q", lease.ID())
	member, other := marker(), marker()
	in := startIn(t, r, lease.ID(), member)
	outside := startIn(t, r, "", other)

	res, err := lease.End(ctxT(t))
	require.NoError(t, err)
	require.Len(t, res, 1)
	assert.Equal(t, in.ID, res[0].ID)
	assert.Empty(t, sleepers(member), "End returns once the tree is gone")
	assert.Len(t, sleepers(other), 2, "a process outside the session is not touched")
	got := awaitFinal(t, r, in.ID)
	assert.Equal(t, StateKilled, got.State)
	assert.Empty(t, got.Reason, "a clean end is the front end's kill, not the registry's own")
	still, err := r.Get(t.Context(), outside.ID)
	require.NoError(t, err)
	assert.Equal(t, StateRunning, still.State)

	_, err = r.Start(ctxT(t), StartOptions{Command: "true", Session: lease.ID()})
	require.ErrorIs(t, err, ErrInvalidOptions, "a start in an ended session")
	assert.Contains(t, err.Error(), "not open")
	res, err = lease.End(ctxT(t))
	assert.NoError(t, err)
	assert.Empty(t, res, "a second End does nothing")
}

// A dropped lease (a front end that vanished) kills the session's trees
// in the background, and says why; a session with two holders is dropped
// only when the last one goes.
func TestSessionDropKillsWhenTheLastHolderGoes(t *testing.T) {
	r := newLocal(t, nil)
	first, err := r.OpenSession(ctxT(t), SessionOptions{})
	require.NoError(t, err)
	second, err := r.OpenSession(ctxT(t), SessionOptions{ID: first.ID()})
	require.NoError(t, err)
	require.Equal(t, first.ID(), second.ID())
	m := marker()
	in := startIn(t, r, first.ID(), m)

	first.Drop()
	first.Drop() // only the first Drop of a lease counts
	// Nothing to wait for when nothing happens: a start still gets in,
	// which it could not once the session was dropped.
	extra := startIn(t, r, first.ID(), marker())
	assert.Len(t, sleepers(m), 2, "a session someone still holds is not dropped")

	second.Drop()
	for _, id := range []string{in.ID, extra.ID} {
		got := awaitFinal(t, r, id)
		assert.Equal(t, StateKilled, got.State)
		assert.Contains(t, got.Reason, "lease of its session "+first.ID()+" dropped")
	}
	assert.Empty(t, sleepers(m))
	_, err = r.Start(ctxT(t), StartOptions{Command: "true", Session: first.ID()})
	assert.ErrorIs(t, err, ErrInvalidOptions, "a start in a dropped session")
}

func TestSessionRefusals(t *testing.T) {
	f := newFixture(t, nil)
	for _, bad := range []string{"a b", "../x", "é", string(make([]byte, 65))} {
		_, err := f.r.OpenSession(t.Context(), SessionOptions{ID: bad})
		assert.ErrorIs(t, err, ErrInvalidOptions, "session ID %q", bad)
		_, err = f.r.Start(t.Context(), StartOptions{Command: "x", Session: bad})
		assert.ErrorIs(t, err, ErrInvalidOptions, "start in session %q", bad)
	}
	_, err := f.r.Start(t.Context(), StartOptions{Command: "x", Session: "never-opened"})
	assert.ErrorIs(t, err, ErrInvalidOptions)
	assert.Empty(t, listed(t, f.r, ListOptions{All: true}), "a refused start registers nothing")
	require.NoError(t, f.r.Close())
	_, err = f.r.OpenSession(t.Context(), SessionOptions{})
	assert.ErrorIs(t, err, ErrClosed)
}

// Starts racing with a drop: each process either joins the session before
// the drop collects its members, and is killed, or is refused. None runs
// on outside the session.
func TestSessionDropRacesWithStarts(t *testing.T) {
	f := newFixture(t, nil)
	for round := range 20 {
		lease, err := f.r.OpenSession(t.Context(), SessionOptions{})
		require.NoError(t, err)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				_, err := f.r.Start(t.Context(), StartOptions{Command: fmt.Sprint("round ", round), Session: lease.ID()})
				if err != nil && !errors.Is(err, ErrInvalidOptions) {
					t.Errorf("start: %v", err)
				}
			})
		}
		lease.Drop()
		wg.Wait()
		require.Eventually(t, func() bool {
			for _, in := range listed(t, f.r, ListOptions{}) {
				if in.Session == lease.ID() {
					return false
				}
			}
			return true
		}, generous, poll, "round %d: a process of the dropped session still runs", round)
	}
}

// The caller's environment reaches the backend as the Spec's Environ and
// is kept nowhere: not in Info, not in the state file, not in what a named
// start compares.
func TestStartEnvironGoesToTheBackendOnly(t *testing.T) {
	stateFile := filepath.Join(t.TempDir(), "state.json")
	f := newFixture(t, func(c *Config) { c.StateFile = stateFile })
	_, err := f.r.Recover(ctxT(t))
	require.NoError(t, err)
	in, p := f.start(StartOptions{Name: "web", Env: []string{"A=1"}, Environ: []string{"VIRTUAL_ENV=/v1", "HOME=/h"}})
	assert.Equal(t, []string{"VIRTUAL_ENV=/v1", "HOME=/h"}, p.Spec().Environ)
	assert.Equal(t, []string{"A=1"}, p.Spec().Env)
	again, err := f.r.Start(ctxT(t), StartOptions{Command: "fake command", Name: "web", Env: []string{"A=1"}, Environ: []string{"VIRTUAL_ENV=/v2"}})
	require.NoError(t, err)
	assert.True(t, again.Reused, "another caller's environment is not another command")
	assert.Equal(t, in.ID, again.ID)
	require.NoError(t, f.r.Close())
	state, err := os.ReadFile(stateFile)
	require.NoError(t, err)
	assert.NotContains(t, string(state), "/v1", "the state file holds no environment")

	_, err = f.r.Start(ctxT(t), StartOptions{Command: "x", Environ: []string{"BASH_FUNC_f%%=() { :; }"}})
	assert.Error(t, err, "an Environ entry no shell can hold is refused")
}

// After a restart, the processes of a session wait for its front end: one
// that opens it again keeps them; the others are killed once
// Config.SessionReclaim has passed, with the reason.
func TestSessionReclaimAfterRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	envDir, stateFile := t.TempDir(), filepath.Join(t.TempDir(), "state.json")
	r1 := localWithState(t, envDir, stateFile)
	_, err := r1.Recover(ctxT(t))
	require.NoError(t, err)
	kept, orphan := marker(), marker()
	back, err := r1.OpenSession(ctxT(t), SessionOptions{})
	require.NoError(t, err)
	gone, err := r1.OpenSession(ctxT(t), SessionOptions{})
	require.NoError(t, err)
	keptIn := startIn(t, r1, back.ID(), kept)
	orphanIn := startIn(t, r1, gone.ID(), orphan)
	// As far as the trees are concerned, Close is a crash; the leases
	// went with the supervisor.
	require.NoError(t, r1.Close())

	// Long enough for the reopen below to come first on a loaded machine.
	const reclaim = 2 * time.Second
	r2, err := New(Config{Open: r1.cfg.Open, DefaultGrace: 2 * time.Second, Logger: r1.cfg.Logger, StateFile: stateFile, SessionReclaim: reclaim})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), generous)
		defer cancel()
		r2.KillAll(ctx, KillAllOptions{Grace: 100 * time.Millisecond})
		r2.Close()
	})
	_, err = r2.Recover(ctxT(t))
	require.NoError(t, err)
	// Before the front end is back, its session is still open to starts.
	during := startIn(t, r2, back.ID(), marker())
	again, err := r2.OpenSession(ctxT(t), SessionOptions{ID: back.ID()})
	require.NoError(t, err)

	got := awaitFinal(t, r2, orphanIn.ID)
	assert.Equal(t, StateKilled, got.State)
	assert.Contains(t, got.Reason, "no front end opened its session "+gone.ID()+" again")
	require.Eventually(t, func() bool { return len(sleepers(orphan)) == 0 }, generous, poll)
	// The reclaimed session is held, with no reclaim armed any more: its
	// processes live on.
	r2.mu.Lock()
	ss := r2.sessions[back.ID()]
	require.NotNil(t, ss)
	assert.Nil(t, ss.reclaim)
	assert.Equal(t, 1, ss.holders)
	r2.mu.Unlock()
	for _, id := range []string{keptIn.ID, during.ID} {
		in, err := r2.Get(t.Context(), id)
		require.NoError(t, err)
		assert.Equal(t, StateRunning, in.State, "a process of the reclaimed session")
	}
	assert.Len(t, sleepers(kept), 2)
	_, err = again.End(ctxT(t))
	require.NoError(t, err)
	assert.Empty(t, sleepers(kept))
}
