package nohup_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env/nohup"
	"github.com/corralhq/corral/env/nohup/nohuptest"
	"github.com/corralhq/corral/internal/shellquote"
)

// TestResidentPoolWaits: with Wait set, a call that finds every resident
// busy waits for one to come free and runs on it (no new resident beyond
// Max, no fallback), and gives up with ErrNoResident only once Wait has
// passed with all of them still busy.
func TestResidentPoolWaits(t *testing.T) {
	var mu sync.Mutex
	started := 0
	pool := &nohup.ResidentPool{Max: 1, Wait: time.Minute, New: func(ctx context.Context, lib string) (*nohup.Resident, error) {
		mu.Lock()
		started++
		mu.Unlock()
		return startResident(t, nohuptest.Shell{Path: "/bin/sh"}, lib), nil
	}}
	defer pool.Close()
	ctx := testCtx(t)
	release := make(chan struct{})
	long := make(chan error, 1)
	go func() {
		_, err := pool.Call(ctx, "", "read x <"+fifo(t, release), "", nil, nil)
		long <- err
	}()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return started == 1 },
		testTimeout, 5*time.Millisecond, "waiting for the long call to start its resident")
	queued := make(chan error, 1)
	go func() {
		code, err := pool.Call(ctx, "", "exit 4", "", nil, nil)
		if err == nil && code != 4 {
			err = errors.New("wrong exit code")
		}
		queued <- err
	}()
	select {
	case err := <-queued:
		require.FailNow(t, fmt.Sprintf("a call returned while the only resident was busy: %v", err))
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-long)
	require.NoError(t, <-queued, "the queued call")
	mu.Lock()
	require.Equal(t, 1, started, "the queued call started a resident of its own")
	mu.Unlock()

	// All busy for longer than Wait: ErrNoResident. The long call says
	// when it holds the resident (on a loaded machine a call can take
	// longer than Wait to get it), and only then is another one made.
	pool.Wait = 20 * time.Millisecond
	release = make(chan struct{})
	holding := filepath.Join(t.TempDir(), "holding")
	script := ": >" + shellquote.Quote(holding) + "; read x <" + fifo(t, release)
	go func() {
		for {
			_, err := pool.Call(ctx, "", script, "", nil, nil)
			if !errors.Is(err, nohup.ErrNoResident) {
				long <- err
				return
			}
		}
	}()
	require.Eventually(t, func() bool { _, err := os.Stat(holding); return err == nil },
		testTimeout, 5*time.Millisecond, "waiting for the long call to hold the resident")
	_, err := pool.Call(ctx, "", "true", "", nil, nil)
	require.ErrorIs(t, err, nohup.ErrNoResident, "a call with every resident busy beyond Wait")
	close(release)
	require.NoError(t, <-long)
}
