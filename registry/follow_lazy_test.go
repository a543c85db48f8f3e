//go:build linux

package registry

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFollowRestoredFinished: a follower of a process that ended before a
// restart gets its output, read back from the sandbox on this first need,
// and the final state; a follower from the end reads nothing back.
func TestFollowRestoredFinished(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	envDir, stateFile := t.TempDir(), filepath.Join(t.TempDir(), "state.json")
	procs := finishedBeforeRestart(t, envDir, stateFile, "echo one; echo two; exit 4")
	var n sandboxCalls
	r := restartedLocal(t, envDir, stateFile, &n)

	atEnd := follow(ctxT(t), r, procs[0].ID, procs[0].OutputBytes)
	<-atEnd.ended
	require.NoError(t, atEnd.err)
	require.Empty(t, atEnd.got)
	require.Equal(t, StateExited, atEnd.fin.State)
	require.Zero(t, n.outputs.Load(), "a follower at the end read the output back")

	fl := follow(ctxT(t), r, procs[0].ID, 0)
	<-fl.ended
	require.NoError(t, fl.err)
	require.Equal(t, []string{"one\ntwo\n"}, fl.got)
	require.Equal(t, StateExited, fl.fin.State)
	require.Equal(t, 4, fl.fin.Status.Code)
	require.Equal(t, int64(1), n.outputs.Load())
}
