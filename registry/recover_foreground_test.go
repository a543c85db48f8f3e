package registry

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A foreground process found running after a restart is killed, tree and
// all: its caller waited on the supervisor that is gone. Without the
// detached start it could not even be found again (it would be lost, and
// keep running).
func TestRecoverKillsOrphanedForeground(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	envDir, stateFile := t.TempDir(), filepath.Join(t.TempDir(), "state.json")
	m := marker()

	r1 := localWithState(t, envDir, stateFile)
	_, err := r1.Recover(ctxT(t))
	require.NoError(t, err)
	started := make(chan Info, 1)
	runDone := make(chan error, 1)
	go func() {
		_, err := r1.Run(context.Background(), RunOptions{
			StartOptions: StartOptions{Command: "echo hi; sleep " + m + " & sleep " + m + "; wait"},
			Started:      func(in Info) { started <- in },
		})
		runDone <- err
	}()
	var in Info
	select {
	case in = <-started:
	case <-time.After(generous):
		t.Fatal("Run did not start")
	}
	require.True(t, in.Foreground)
	require.True(t, in.Detached, "a foreground process of a checkpointing registry starts detached")
	require.Eventually(t, func() bool { return len(sleepers(m)) == 2 }, generous, poll, "waiting for the tree")

	// As far as the tree is concerned, Close is a crash: the supervisor
	// goes without killing what it started detached.
	require.NoError(t, r1.Close())
	require.ErrorIs(t, <-runDone, ErrClosed)
	require.Len(t, sleepers(m), 2, "the tree outlives its supervisor")

	r2 := localWithState(t, envDir, stateFile)
	t.Cleanup(func() { r2.Close() })
	_, err = r2.Recover(ctxT(t))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := r2.Get(t.Context(), in.ID)
		return err == nil && got.State.Final()
	}, generous, poll, "waiting for the orphaned foreground process to be killed")
	got, err := r2.Get(t.Context(), in.ID)
	require.NoError(t, err)
	require.Equal(t, StateKilled, got.State)
	require.Equal(t, orphanedForegroundReason, got.Reason)
	require.Eventually(t, func() bool { return len(sleepers(m)) == 0 }, generous, poll, "the tree outlived the kill")
}
