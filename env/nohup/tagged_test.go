package nohup_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
	"github.com/corralhq/corral/env/nohup/nohuptest"
)

// TestTagged: a new Env over the same BaseDir finds a process by the
// Spec.Tag it was started with, and only that one: not a process with
// another tag, nor one whose command line holds the tag's spec text. Its
// handle ends the tree and removes its directory. Under every shell.
func TestTagged(t *testing.T) {
	forShells(t, func(t *testing.T, sh nohuptest.Shell) {
		base := t.TempDir() + "/state"
		open := func() *nohup.Env {
			e, err := nohup.New(&nohuptest.Local{Shell: sh.Path, Env: sh.Env, Resident: true},
				nohup.Options{Name: "tagged", BaseDir: base, Shell: sh.Path})
			require.NoError(t, err)
			t.Cleanup(func() { _ = e.Close() })
			return e
		}
		e1 := open()
		m1, m2, m3 := marker(), marker(), marker()
		p1, err := e1.Start(testCtx(t), env.Spec{Command: "sleep " + m1 + " & sleep " + m1, Detach: true, Tag: "proc_aaaaaaaaaaaa"})
		require.NoError(t, err)
		require.NoError(t, p1.Release()) // dropped, as a crash would
		start(t, e1, env.Spec{Command: "sleep " + m2, Detach: true, Tag: "proc_bbbbbbbbbbbb"})
		start(t, e1, env.Spec{Command: "echo \"stag='proc_aaaaaaaaaaaa' si='0' \"; sleep " + m3, Detach: true, Tag: "proc_cccccccccccc"})

		e2 := open()
		found, err := e2.Tagged(testCtx(t), []string{"proc_aaaaaaaaaaaa", "proc_dddddddddddd", "", "bad tag"})
		require.NoError(t, err)
		require.Len(t, found, 1, "found %v", found)
		require.Len(t, found["proc_aaaaaaaaaaaa"], 1)
		h := found["proc_aaaaaaaaaaaa"][0]
		assert.Equal(t, p1.PID(), h.PID())
		surv, err := h.Survivors(testCtx(t))
		require.NoError(t, err)
		assert.GreaterOrEqual(t, len(surv), 2, "the tree: sh (unless it exec'd the last command) and two sleeps")
		require.NoError(t, h.Signal(testCtx(t), env.SIGKILL))
		_, err = h.Wait(testCtx(t))
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			s, err := h.Survivors(testCtx(t))
			return err == nil && len(s) == 0
		}, testTimeout, 20*time.Millisecond, "the tagged tree did not end")
		require.NoError(t, h.Remove(testCtx(t)))

		found, err = e2.Tagged(testCtx(t), []string{"proc_aaaaaaaaaaaa", "proc_bbbbbbbbbbbb"})
		require.NoError(t, err)
		assert.Empty(t, found["proc_aaaaaaaaaaaa"], "a removed process is still found")
		require.Len(t, found["proc_bbbbbbbbbbbb"], 1, "the other tag's process")
		for _, h := range found["proc_bbbbbbbbbbbb"] {
			st, err := h.Wait(canceledCtx())
			assert.ErrorIs(t, err, context.Canceled, "still running: %v", st)
			require.NoError(t, h.Release())
		}
	})
}

// TestAttachShares: concurrent Attach calls of many processes share their
// round trips (one corral_states call for those that queued), so a
// restarted supervisor's burst of attaches costs a few round trips, not
// one each; each handle still knows its own process and whether it
// ended.
func TestAttachShares(t *testing.T) {
	const n = 24
	base := t.TempDir() + "/state"
	e1, err := nohup.New(&nohuptest.Local{Resident: true}, nohup.Options{Name: "shares", BaseDir: base})
	require.NoError(t, err)
	defer e1.Close()
	refs := make([]env.Ref, n)
	for i := range n {
		cmd := "sleep " + marker()
		if i%2 == 1 {
			cmd = "exit 7"
		}
		p, err := e1.Start(testCtx(t), env.Spec{Command: cmd, Detach: true})
		require.NoError(t, err)
		if i%2 == 1 {
			_, err := p.Wait(testCtx(t))
			require.NoError(t, err)
		}
		refs[i], err = p.Ref()
		require.NoError(t, err)
		require.NoError(t, p.Release())
	}

	tr := &nohuptest.Local{Resident: true}
	e2, err := nohup.New(tr, nohup.Options{Name: "shares", BaseDir: base})
	require.NoError(t, err)
	defer e2.Close()
	handles := make([]env.Process, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-gate
			h, err := e2.Attach(testCtx(t), refs[i])
			if err != nil {
				assert.Fail(t, fmt.Sprint(err))
				return
			}
			handles[i] = h
		})
	}
	close(gate)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d attaches took %d round trips", n, tr.Execs())
	assert.LessOrEqual(t, tr.Execs(), int64(n/2), "attaches did not share their round trips")
	for i, h := range handles {
		assert.Equal(t, refs[i].PID, h.PID())
		st, err := h.Wait(canceledCtx())
		if i%2 == 1 {
			if assert.NoError(t, err, "process %d ended before the attach", i) {
				assert.Equal(t, 7, st.Code)
			}
		} else {
			assert.ErrorIs(t, err, context.Canceled, "process %d still runs", i)
			require.NoError(t, h.Signal(testCtx(t), env.SIGKILL))
			_, _ = h.Wait(testCtx(t))
		}
		require.NoError(t, h.Release())
	}
}

// canceledCtx is a context that is already done: a Wait with it answers
// only what the handle knows without a round trip.
func canceledCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
