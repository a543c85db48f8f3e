package local

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

// TestTreeStatsDetachedAndForeign: a detached process's tree is measured
// like a child's, and each Env gives nil for the other's handles.
func TestTreeStatsDetachedAndForeign(t *testing.T) {
	mechanisms(t, func(t *testing.T, disableCgroup bool) {
		e := newTestEnv(t, disableCgroup)
		other := newTestEnv(t, disableCgroup)
		d := start(t, e, env.Spec{Command: "sleep 600 & sleep 600 & wait", Detach: true})
		c := start(t, other, env.Spec{Command: "sleep 600 & wait"})
		// The sleeps are forked a moment after Start returns.
		awaitSurvivors(t, d, 3)
		awaitSurvivors(t, c, 2)

		got, err := e.TreeStats(testCtx(t), []env.Process{d, c})
		require.NoError(t, err)
		require.Len(t, got, 2)
		require.NotNil(t, got[0], "the detached tree")
		assert.Equal(t, 3, got[0].Pids)
		assert.Positive(t, got[0].RSS)
		assert.Empty(t, got[0].Missing, "our own processes' io is readable")
		assert.Nil(t, got[1], "another Env's process")

		got, err = other.TreeStats(testCtx(t), []env.Process{d, c, c})
		require.NoError(t, err)
		assert.Nil(t, got[0], "another Env's process")
		require.NotNil(t, got[1])
		assert.Equal(t, 2, got[1].Pids, "the shell and its sleep")
		assert.Equal(t, got[1].Pids, got[2].Pids, "a handle given twice is measured twice")

		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err = e.TreeStats(ctx, []env.Process{d})
		assert.ErrorIs(t, err, context.Canceled)
	})
}

// awaitSurvivors waits until p's tree has n live processes.
func awaitSurvivors(t *testing.T, p env.Process, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pids, err := p.Survivors(testCtx(t))
		require.NoError(t, err)
		if len(pids) == n {
			return
		}
		require.True(t, time.Now().Before(deadline), "the tree has %v, want %d processes", pids, n)
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStatusRSSAndIO reads the figures from files shaped as the kernel
// writes them, and refuses io without its numbers.
func TestStatusRSSAndIO(t *testing.T) {
	dir := t.TempDir()
	status := filepath.Join(dir, "status")
	require.NoError(t, os.WriteFile(status, []byte("Name:\tsh\nVmPeak:\t    9999 kB\nVmRSS:\t    1234 kB\nThreads:\t1\n"), 0o644))
	rss, err := statusRSS(status)
	require.NoError(t, err)
	assert.Equal(t, int64(1234*1024), rss)

	kthread := filepath.Join(dir, "kthread")
	require.NoError(t, os.WriteFile(kthread, []byte("Name:\tkworker\nThreads:\t1\n"), 0o644))
	rss, err = statusRSS(kthread)
	require.NoError(t, err)
	assert.Zero(t, rss, "no VmRSS: no memory of its own")

	io := filepath.Join(dir, "io")
	require.NoError(t, os.WriteFile(io, []byte("rchar: 1\nwchar: 2\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 0\n"), 0o644))
	r, w, err := readIO(io)
	require.NoError(t, err)
	assert.Equal(t, [2]int64{4096, 8192}, [2]int64{r, w})

	require.NoError(t, os.WriteFile(io, []byte("rchar: 1\nread_bytes: x\n"), 0o644))
	_, _, err = readIO(io)
	assert.Error(t, err)
	_, _, err = readIO(filepath.Join(dir, "missing"))
	assert.Error(t, err)
}
