package registry

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
)

// nextEvent returns the subscription's next event or fails the test.
func nextEvent(t *testing.T, sub *Subscription) Event {
	t.Helper()
	ev, err := sub.Next(ctxT(t))
	require.NoError(t, err)
	return ev
}

// suppressedCount reads how many events of type typ the current cooldown
// holds back.
func suppressedCount(r *Registry, typ EventType) int {
	r.ev.mu.Lock()
	defer r.ev.mu.Unlock()
	return r.ev.suppressed[typ]
}

// Notified exits are never held back by the global breaker, carry their
// status and output tail, and a completion already received through Wait
// is not delivered; un-notified events are still held back and counted.
func TestNotifiedExitsBypassGlobalRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const jobs = GlobalEventMax + 3
		f := newFixture(t, nil)
		sub := f.r.Subscribe()
		defer sub.Close()

		ids := make([]string, jobs)
		fps := make([]*envtest.FakeProcess, jobs)
		for i := range jobs {
			in, fp := f.start(StartOptions{Command: fmt.Sprintf("job %d", i), Notify: true})
			ids[i], fps[i] = in.ID, fp
		}
		// The 16th started event opened the cooldown.
		for i := range GlobalEventMax {
			ev := nextEvent(t, sub)
			require.Equal(t, EventStarted, ev.Type)
			require.Equal(t, ids[i], ev.ID)
		}

		// An un-notified flood during the cooldown stays held back.
		const quiet = 5
		for range quiet {
			_, fp := f.start(StartOptions{})
			fp.Exit(env.Exited(0))
		}
		require.Eventually(t, func() bool { return suppressedCount(f.r, EventExited) == quiet },
			generous, time.Millisecond, "un-notified exits are counted by the breaker")

		// A notified process whose result a caller received first.
		waited, wfp := f.start(StartOptions{Command: "waited", Notify: true})
		wfp.WriteOutput("done\n")
		wfp.Exit(env.Exited(0))
		got, err := f.r.Wait(ctxT(t), waited.ID, 0)
		require.NoError(t, err)
		require.Equal(t, StateExited, got.State)

		for i, fp := range fps {
			fp.WriteOutput(fmt.Sprintf("compiling\n\x1b[32mok job %d\x1b[0m\n", i))
			fp.Exit(env.Exited(i % 3))
		}
		exits := map[string]Event{}
		for len(exits) < jobs {
			ev := nextEvent(t, sub)
			require.Equal(t, EventExited, ev.Type, "only the notified exits pass during the cooldown: %+v", ev)
			require.NotEqual(t, waited.ID, ev.ID, "a completion received through Wait was delivered")
			exits[ev.ID] = ev
		}
		for i, id := range ids {
			ev, ok := exits[id]
			require.True(t, ok, "no exited event for job %d", i)
			assert.True(t, ev.Notify)
			assert.Equal(t, StateExited, ev.State)
			if assert.NotNil(t, ev.Status, "job %d", i) {
				assert.Equal(t, i%3, ev.Status.Code, "job %d", i)
			}
			assert.Equal(t, fmt.Sprintf("compiling\nok job %d", i), ev.Tail, "job %d", i)
		}

		// The waited process's event would have come before this one.
		_, sfp := f.start(StartOptions{Command: "sentinel", Notify: true})
		sfp.Exit(env.Exited(0))
		ev := nextEvent(t, sub)
		require.Equal(t, "sentinel", ev.Command, "expected the sentinel's exit, got %+v", ev)

		// The cooldown's summary counts what was held back, and no notified
		// exit among it.
		time.Sleep(GlobalCooldown)
		synctest.Wait()
		ev = nextEvent(t, sub)
		require.Equal(t, EventSuppressed, ev.Type)
		assert.Equal(t, map[EventType]int{
			EventStarted: jobs - GlobalEventMax + quiet + 2, // + waited and sentinel
			EventExited:  quiet,
		}, ev.Suppressed)
	})
}

// Notified exits do not count toward the window either: they cannot push
// watch matches into a cooldown.
func TestNotifiedExitsDoNotFillTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		var fps []*envtest.FakeProcess
		for range GlobalEventMax - 1 {
			_, fp := f.start(StartOptions{Notify: true})
			fps = append(fps, fp)
		}
		sub := f.r.Subscribe()
		defer sub.Close()
		for _, fp := range fps {
			fp.Exit(env.Exited(0))
		}
		for range fps {
			require.Equal(t, EventExited, nextEvent(t, sub).Type)
		}
		// One event left in the window: this start is delivered, not held.
		in, _ := f.start(StartOptions{})
		ev := nextEvent(t, sub)
		require.Equal(t, EventStarted, ev.Type)
		require.Equal(t, in.ID, ev.ID)
	})
}

// A Wait or Run blocked when the process ends takes the completion: its
// exited event is consumed before any subscriber can see it.
func TestBlockedWaiterConsumesCompletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		sub := f.r.Subscribe()
		defer sub.Close()
		ctx := ctxT(t)

		in, fp := f.start(StartOptions{Notify: true})
		p, err := f.r.lookup(in.ID)
		require.NoError(t, err)
		waited := make(chan Info, 1)
		go func() {
			got, _ := f.r.Wait(ctx, in.ID, 0)
			waited <- got
		}()
		require.Eventually(t, func() bool { return p.waiters.Load() == 1 }, generous, time.Millisecond)
		// A subscriber already blocked in Next races the waiter for the event.
		evs := make(chan Event, 4)
		go func() {
			for {
				ev, err := sub.Next(ctx)
				if err != nil {
					return
				}
				evs <- ev
			}
		}()
		require.Equal(t, EventStarted, (<-evs).Type)
		fp.Exit(env.Exited(3))
		got := <-waited
		require.Equal(t, StateExited, got.State)
		require.Zero(t, p.waiters.Load())

		// A foreground Run is a waiter too.
		f.onStart(func(fp *envtest.FakeProcess) {
			go func() {
				fp.WriteOutput("run output\n")
				fp.Exit(env.Exited(0))
			}()
		})
		res, err := f.r.Run(ctx, RunOptions{StartOptions: StartOptions{Command: "run", Notify: true}})
		require.NoError(t, err)
		require.Equal(t, StateExited, res.State)
		f.onStart(nil)

		_, sfp := f.start(StartOptions{Command: "sentinel", Notify: true})
		sfp.Exit(env.Exited(0))
		for ev := range evs {
			if ev.Type == EventStarted {
				continue
			}
			require.Equal(t, "sentinel", ev.Command, "a completion a waiter received was delivered: %+v", ev)
			break
		}
	})
}

// exitedEvent marks the completion consumed when a waiter is counted: the
// mechanism the test above exercises, without depending on scheduling.
func TestExitedEventWithWaiterIsConsumed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		in, fp := f.start(StartOptions{Notify: true})
		p, err := f.r.lookup(in.ID)
		require.NoError(t, err)
		p.enterWait()
		fp.Exit(env.Exited(0))
		<-p.done
		ev := p.exitedEvent(p.info())
		assert.True(t, ev.Consumed(), "an exit with a blocked waiter must count as consumed")
		assert.True(t, p.leaveWait(), "the waiter must see the end")

		in2, fp2 := f.start(StartOptions{Notify: true})
		p2, err := f.r.lookup(in2.ID)
		require.NoError(t, err)
		fp2.Exit(env.Exited(0))
		<-p2.done
		ev = p2.exitedEvent(p2.info())
		assert.False(t, ev.Consumed(), "nobody waited")
		_, err = f.r.Poll(ctxT(t), in2.ID, 0)
		require.NoError(t, err)
		assert.True(t, ev.Consumed(), "a Poll that returned the final state consumes it, for events already published too")
	})
}

// A Wait whose timeout fires as the process ends reports the end.
func TestWaitPrefersTheEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		in, fp := f.start(StartOptions{})
		p, err := f.r.lookup(in.ID)
		require.NoError(t, err)
		fp.Exit(env.Exited(0))
		<-p.done
		// Both cases are ready: select picks one at random, so try a few.
		for range 20 {
			got, err := f.r.Wait(ctxT(t), in.ID, time.Nanosecond)
			require.NoError(t, err)
			require.Equal(t, StateExited, got.State)
		}
	})
}

func TestOutputTail(t *testing.T) {
	long := strings.Repeat("é", MaxEventTail) // 2 bytes each: one line of 2×MaxEventTail bytes
	lines := func(from, to int) string {
		var b strings.Builder
		for i := from; i <= to; i++ {
			fmt.Fprintf(&b, "line %04d\n", i)
		}
		return b.String()
	}
	for _, tc := range []struct {
		name, out, want string
	}{
		{"empty", "", ""},
		{"short", "a\nb\n", "a\nb"},
		{"no final newline", "a\nb", "a\nb"},
		{"ansi stripped", "\x1b[1;31mred\x1b[0m\r\n\x1b]0;title\x07plain\n", "red\nplain"},
		{"cut on a line start", lines(1, 1000), strings.TrimSuffix(lines(1000-MaxEventTail/10+1, 1000), "\n")},
		{"one long line cut on a character", "x\n" + long + "\n", long[len(long)-MaxEventTail:]},
		{"invalid UTF-8 replaced", "a\xffb\n", "a\uFFFDb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuffer(1<<20, 1<<10)
			b.Write([]byte(tc.out))
			got := outputTail(b, MaxEventTail)
			assert.Equal(t, tc.want, got)
			assert.LessOrEqual(t, len(got), MaxEventTail)
			assert.True(t, utf8.ValidString(got))
		})
	}
	t.Run("window starts inside a line", func(t *testing.T) {
		// More output than the window: the partial first line is dropped.
		b := newBuffer(1<<20, 1<<10)
		b.Write([]byte(strings.Repeat("z", tailWindow) + "\nlast\n"))
		assert.Equal(t, "last", outputTail(b, MaxEventTail))
	})
	t.Run("buffer gap", func(t *testing.T) {
		// A small buffer whose held tail is shorter than the window.
		b := newBuffer(64, 16)
		b.Write([]byte(strings.Repeat("h", 16) + strings.Repeat("g", 100) + "\nend one\nend two\n"))
		assert.Equal(t, "end one\nend two", outputTail(b, MaxEventTail))
	})
	t.Run("odd-length long line", func(t *testing.T) {
		b := newBuffer(1<<20, 1<<10)
		// The cut would land on the second byte of a character.
		b.Write([]byte("x" + long + "y"))
		got := outputTail(b, MaxEventTail)
		assert.True(t, utf8.ValidString(got))
		assert.Equal(t, long[len(long)-MaxEventTail+2:]+"y", got)
	})
}
