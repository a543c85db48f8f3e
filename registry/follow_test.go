package registry

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

// follower runs Follow in the background and records what it hands fn,
// with the (bubble) time it got each piece.
type follower struct {
	mu    sync.Mutex
	got   []string
	at    []time.Time
	fin   PollResult
	err   error
	ended chan struct{}
}

func follow(ctx context.Context, r *Registry, id string, since int64) *follower {
	fl := &follower{ended: make(chan struct{})}
	go func() {
		defer close(fl.ended)
		fl.fin, fl.err = r.Follow(ctx, id, since, func(pr PollResult) bool {
			fl.mu.Lock()
			defer fl.mu.Unlock()
			fl.got = append(fl.got, string(pr.Output))
			fl.at = append(fl.at, time.Now())
			return true
		})
	}()
	return fl
}

func (fl *follower) last() (string, time.Time, int) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if len(fl.got) == 0 {
		return "", time.Time{}, 0
	}
	return fl.got[len(fl.got)-1], fl.at[len(fl.at)-1], len(fl.got)
}

// TestFollowIsPushed: a follower of a quiet process gets a byte at the
// instant it is written, however long the process was quiet before, and
// nothing wakes it meanwhile. In the bubble time moves only when every
// goroutine waits, so a follower that polled would get the byte only at
// its next tick, later than the write.
func TestFollowIsPushed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		in, fp := f.start(StartOptions{})
		fl := follow(t.Context(), f.r, in.ID, 0)
		for i, s := range []string{"a", "bc", "déf"} {
			time.Sleep(time.Hour) // quiet: a poller would have backed off
			synctest.Wait()
			wrote := time.Now()
			fp.WriteOutput(s)
			synctest.Wait()
			got, at, n := fl.last()
			require.Equal(t, i+1, n, "pieces handed to fn after write %d", i)
			require.Equal(t, s, got)
			require.Equal(t, wrote, at, "the follower got %q after %s, not when it was written", s, at.Sub(wrote))
		}
		fp.Exit(env.ExitStatus{Code: 3})
		<-fl.ended
		require.NoError(t, fl.err)
		require.Equal(t, StateExited, fl.fin.State)
		require.Equal(t, int64(len("abcdéf")), fl.fin.Next)
	})
}

// TestFollowEnds: Follow returns the final state with all of the output,
// also what was written just before the exit, and from an offset only
// what came after it.
func TestFollowEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		in, fp := f.start(StartOptions{})
		fp.WriteOutput("head ")
		synctest.Wait()
		fl := follow(t.Context(), f.r, in.ID, 2)
		synctest.Wait()
		fp.WriteOutput("last")
		fp.Exit(env.ExitStatus{})
		<-fl.ended
		require.NoError(t, fl.err)
		require.Equal(t, StateExited, fl.fin.State)
		fl.mu.Lock()
		defer fl.mu.Unlock()
		var all string
		for _, g := range fl.got {
			all += g
		}
		require.Equal(t, "ad last", all)

		// A follower of a finished process gets it all at once.
		done := follow(t.Context(), f.r, in.ID, 0)
		<-done.ended
		require.NoError(t, done.err)
		require.Equal(t, []string{"head last"}, done.got)
	})
}

// TestFollowStops: a waiting follower returns when its context ends, when
// fn says stop, and when the registry closes.
func TestFollowStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		in, fp := f.start(StartOptions{})

		ctx, cancel := context.WithCancel(t.Context())
		fl := follow(ctx, f.r, in.ID, 0)
		synctest.Wait()
		cancel()
		<-fl.ended
		require.ErrorIs(t, fl.err, context.Canceled)

		stopped := make(chan error)
		go func() {
			_, err := f.r.Follow(t.Context(), in.ID, 0, func(PollResult) bool { return false })
			stopped <- err
		}()
		synctest.Wait()
		fp.WriteOutput("x")
		require.NoError(t, <-stopped)

		fl = follow(t.Context(), f.r, in.ID, 1)
		synctest.Wait()
		require.NoError(t, f.r.Close())
		<-fl.ended
		require.ErrorIs(t, fl.err, ErrClosed)
	})
}
