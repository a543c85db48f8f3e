package registry

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

func TestWatcherLinesAndStripping(t *testing.T) {
	w, err := newWatcher([]string{"ERROR"}, []string{`^done in \d+s$`})
	require.NoError(t, err)
	now := time.Unix(0, 0)
	clock := func() time.Time { now = now.Add(time.Minute); return now } // every match in a new window
	var hits []watchHit
	// A line split across writes, with colour codes split too.
	for _, chunk := range []string{"ok\nan ER", "\x1b[3", "1mROR\x1b[0m here\n", "no match\ndone in 5", "s\ntrailing ERROR"} {
		hits = append(hits, w.feed([]byte(chunk), clock, false)...)
	}
	hits = append(hits, w.feed(nil, clock, true)...)
	want := []watchHit{
		{EventWatchMatch, "ERROR", "an ERROR here"},
		{EventWatchMatch, `^done in \d+s$`, "done in 5s"},
		{EventWatchMatch, "ERROR", "trailing ERROR"},
	}
	if fmt.Sprint(hits) != fmt.Sprint(want) {
		t.Fatalf("hits %q\nwant %q", hits, want)
	}
}

func TestWatcherRateLimit(t *testing.T) {
	w, _ := newWatcher([]string{"x"}, nil)
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) EventType { return w.onMatch(t0.Add(d)) }
	// Window 1: first reported, the rest held back.
	if at(0) != EventWatchMatch || at(time.Second) != "" || at(9*time.Second) != "" {
		t.Fatal("window 1")
	}
	// A quiet gap of more than a window resets the run of limited windows.
	if at(30*time.Second) != EventWatchMatch || at(31*time.Second) != "" {
		t.Fatal("window 2")
	}
	if at(40*time.Second) != EventWatchMatch || at(41*time.Second) != "" {
		t.Fatal("window 3")
	}
	if w.disabled {
		t.Fatal("disabled after 2 limited windows in a row")
	}
	if at(50*time.Second) != EventWatchMatch || at(51*time.Second) != EventWatchDisabled {
		t.Fatal("the third limited window in a row must disable watching")
	}
	if at(100*time.Second) != "" || !w.disabled {
		t.Fatal("matches after disabling")
	}
	// A window without a held-back match resets the run.
	w2, _ := newWatcher([]string{"x"}, nil)
	w2.onMatch(t0)
	w2.onMatch(t0.Add(time.Second))      // limited (run 1)
	w2.onMatch(t0.Add(10 * time.Second)) // new window, not limited
	w2.onMatch(t0.Add(20 * time.Second)) // new window: previous not limited, run resets
	w2.onMatch(t0.Add(21 * time.Second)) // limited (run 1)
	w2.onMatch(t0.Add(30 * time.Second)) //
	w2.onMatch(t0.Add(31 * time.Second)) // limited (run 2)
	if w2.disabled || w2.limitedRun != 2 {
		t.Fatalf("run %d disabled %v", w2.limitedRun, w2.disabled)
	}
}

// Through the registry: matches become events, the per-process limit
// holds back repeats, disabling publishes watch_disabled and promises the
// completion event even without Notify.
func TestWatchEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		sub := f.r.Subscribe()
		defer sub.Close()
		in, fp := f.start(StartOptions{Watch: []string{"FAIL"}})
		next := func() Event {
			t.Helper()
			ev, err := sub.Next(ctxT(t)) // the test spans 30 s of bubble time
			require.NoError(t, err)
			return ev
		}
		if ev := next(); ev.Type != EventStarted {
			t.Fatalf("%+v", ev)
		}
		written := int64(0)
		emit := func(s string) {
			fp.WriteOutput(s)
			written += int64(len(s))
			require.Eventually(t, func() bool { g, _ := f.r.Get(t.Context(), in.ID); return g.OutputBytes == written },
				generous, poll, "waiting for the registry to ingest %d bytes", written)
		}
		for window := range 3 {
			emit("test FAIL one\n")
			ev := next()
			if ev.Type != EventWatchMatch || ev.Pattern != "FAIL" || ev.Line != "test FAIL one" || ev.ID != in.ID {
				t.Fatalf("window %d: %+v", window, ev)
			}
			time.Sleep(time.Second)
			synctest.Wait()
			emit("test FAIL two\n") // held back
			time.Sleep(9 * time.Second)
			synctest.Wait()
		}
		// The third held-back match disabled watching.
		if ev := next(); ev.Type != EventWatchDisabled || !ev.Notify {
			t.Fatalf("%+v", ev)
		}
		if g, _ := f.r.Get(t.Context(), in.ID); !g.WatchDisabled {
			t.Fatal("Info.WatchDisabled not set")
		}
		emit("FAIL again\n")
		fp.Exit(env.Exited(0))
		ev := next()
		if ev.Type != EventExited || !ev.Notify {
			t.Fatalf("completion after disabling: %+v", ev)
		}
	})
}

func TestGlobalRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		sub := f.r.Subscribe()
		defer sub.Close()
		for range GlobalEventMax + 5 {
			f.start(StartOptions{}) // one started event each
		}
		ctx := ctxT(t)
		for i := range GlobalEventMax {
			ev, err := sub.Next(ctx)
			if err != nil || ev.Type != EventStarted || ev.Seq != int64(i+1) {
				t.Fatalf("event %d: %+v %v", i, ev, err)
			}
		}
		// Nothing more until the cooldown ends, even after the window passed.
		time.Sleep(GlobalEventWindow)
		synctest.Wait()
		f.start(StartOptions{})
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		if ev, err := sub.Next(short); err == nil {
			t.Fatalf("event during cooldown: %+v", ev)
		}
		cancel()
		time.Sleep(GlobalCooldown - GlobalEventWindow)
		synctest.Wait()
		ev, err := sub.Next(ctx)
		if err != nil || ev.Type != EventSuppressed || ev.Suppressed[EventStarted] != 6 {
			t.Fatalf("summary %+v %v", ev, err)
		}
		// Normal delivery resumes.
		f.start(StartOptions{})
		if ev, err := sub.Next(ctx); err != nil || ev.Type != EventStarted {
			t.Fatalf("after cooldown %+v %v", ev, err)
		}
	})
}
