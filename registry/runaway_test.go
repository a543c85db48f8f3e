package registry

import (
	"context"
	"encoding/json"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
)

// The runaway judgement on the scripted sampler of stats_test.go, in fake
// time: the test drives each tree's cumulative CPU and memory a second at
// a time and reads the runaway events.

// runawayEvents collects the runaway events of sub published so far.
func runawayEvents(t *testing.T, sub *Subscription) []Event {
	t.Helper()
	// A done context: Next returns what is queued, then the context's
	// error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out []Event
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			return out
		}
		if ev.Type == EventRunaway {
			out = append(out, ev)
		}
	}
}

// burn runs p at cpu (a share of one core) for secs seconds of fake time,
// from the cumulative CPU *used, writing output every `every` seconds
// (never when 0).
func burn(f *statsFixture, p *envtest.FakeProcess, used *time.Duration, rss *int64, grow int64, cpu float64, secs, every int) {
	for s := 1; s <= secs; s++ {
		*used += time.Duration(cpu / 100 * float64(time.Second))
		*rss += grow
		f.env.SetStats(p, env.TreeStats{CPU: *used, RSS: *rss, Pids: 1})
		if every > 0 && s%every == 0 {
			p.WriteOutput("tick\n")
		}
		settle(time.Second)
	}
}

func (f *statsFixture) startRunaway(t *testing.T, o *RunawayOptions) (Info, *envtest.FakeProcess) {
	t.Helper()
	in, err := f.r.Start(ctxT(t), StartOptions{Command: "spin", Runaway: o})
	require.NoError(t, err)
	return in, f.env.Last()
}

// TestRunawayCPU: a tree at 98% of a core with no output is named once,
// after For; Info says so until it writes, which re-arms the event.
func TestRunawayCPU(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newStatsFixture(t)
		sub := f.r.Subscribe()
		defer sub.Close()
		in, p := f.startRunaway(t, &RunawayOptions{CPUPercent: 90, For: Duration(30 * time.Second)})
		var used time.Duration
		rss := int64(10 << 20)
		settle(500 * time.Millisecond)

		burn(f, p, &used, &rss, 0, 98, 25, 0)
		assert.Empty(t, runawayEvents(t, sub), "not before For")
		assert.False(t, f.info(t, in.ID).Runaway)

		burn(f, p, &used, &rss, 0, 98, 10, 0)
		evs := runawayEvents(t, sub)
		require.Len(t, evs, 1, "once For passed")
		assert.Equal(t, in.ID, evs[0].ID)
		assert.Regexp(t, `^`+in.ID+` used 98% of a core for 3\ds with no output: spin$`, evs[0].Summary)
		assert.True(t, f.info(t, in.ID).Runaway)

		burn(f, p, &used, &rss, 0, 98, 60, 0)
		assert.Empty(t, runawayEvents(t, sub), "once per episode")

		p.WriteOutput("alive\n")
		settle(2 * time.Second)
		assert.False(t, f.info(t, in.ID).Runaway, "output ends the episode")
		burn(f, p, &used, &rss, 0, 98, 35, 0)
		assert.Len(t, runawayEvents(t, sub), 1, "a new episode after the output")
	})
}

// TestRunawayNotWithOutput: the same CPU with output flowing, or below the
// share, is no runaway.
func TestRunawayNotWithOutput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newStatsFixture(t)
		sub := f.r.Subscribe()
		defer sub.Close()
		talker, tp := f.startRunaway(t, &RunawayOptions{CPUPercent: 90, For: Duration(30 * time.Second)})
		idler, ip := f.startRunaway(t, &RunawayOptions{CPUPercent: 90, For: Duration(30 * time.Second)})
		var tu, iu time.Duration
		trss, irss := int64(10<<20), int64(10<<20)
		settle(500 * time.Millisecond)
		for range 12 {
			// Interleaved, so that both run through the same fake time.
			burn(f, tp, &tu, &trss, 0, 98, 5, 5)
			burn(f, ip, &iu, &irss, 0, 50, 5, 0)
		}
		assert.Empty(t, runawayEvents(t, sub))
		assert.False(t, f.info(t, talker.ID).Runaway)
		assert.False(t, f.info(t, idler.ID).Runaway)
	})
}

// TestRunawayMemory: RSS grown by Memory within For is named once; the
// registry's default applies to a process that gives no thresholds.
func TestRunawayMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newStatsFixture(t)
		f.r.cfg.Runaway = &RunawayOptions{Memory: 100 << 20, For: Duration(time.Minute)}
		sub := f.r.Subscribe()
		defer sub.Close()
		in, p := f.startRunaway(t, nil)
		var used time.Duration
		rss := int64(50 << 20)
		settle(500 * time.Millisecond)

		burn(f, p, &used, &rss, 0, 1, 30, 1)
		assert.Empty(t, runawayEvents(t, sub), "steady memory")
		burn(f, p, &used, &rss, 2<<20, 1, 40, 1)
		assert.Empty(t, runawayEvents(t, sub), "80M grown: under the threshold")
		burn(f, p, &used, &rss, 2<<20, 1, 25, 1)
		evs := runawayEvents(t, sub)
		require.Len(t, evs, 1)
		assert.Contains(t, evs[0].Summary, in.ID+" grew from ")
		assert.Contains(t, evs[0].Summary, " of memory in ")
		assert.True(t, f.info(t, in.ID).Runaway)
		assert.Nil(t, f.info(t, in.ID).RunawayOptions, "the default is not the process's own")

		burn(f, p, &used, &rss, 0, 1, 70, 1)
		assert.False(t, f.info(t, in.ID).Runaway, "steady again for a window")
		burn(f, p, &used, &rss, 4<<20, 1, 30, 1)
		assert.Len(t, runawayEvents(t, sub), 1, "re-armed")
	})
}

func TestRunawayOptionsRefused(t *testing.T) {
	f := newStatsFixture(t)
	for _, o := range []RunawayOptions{{CPUPercent: -1}, {Memory: -1}, {CPUPercent: 50, For: Duration(time.Millisecond)}} {
		_, err := f.r.Start(ctxT(t), StartOptions{Command: "spin", Runaway: &o})
		assert.ErrorIs(t, err, ErrInvalidOptions, "%+v", o)
	}
}

func (f *statsFixture) info(t *testing.T, id string) Info {
	t.Helper()
	in, err := f.r.Get(ctxT(t), id)
	require.NoError(t, err)
	return in
}

// TestRunawayKeptInTheStateFile: a process's own thresholds survive a
// restart; thresholds out of bounds in a record are dropped.
func TestRunawayKeptInTheStateFile(t *testing.T) {
	f := newStatsFixture(t)
	o := RunawayOptions{CPUPercent: 90, Memory: 1 << 30, For: Duration(time.Minute)}
	in, _ := f.startRunaway(t, &o)
	p, err := f.r.lookup(in.ID)
	require.NoError(t, err)
	b, err := json.Marshal(p.record())
	require.NoError(t, err)
	var rec checkpointRecord
	require.NoError(t, json.Unmarshal(b, &rec))
	q := f.r.restoredProc(rec)
	require.NotNil(t, q.opts.Runaway)
	assert.Equal(t, o, *q.opts.Runaway)

	rec.Runaway = &RunawayOptions{CPUPercent: -3}
	assert.Nil(t, f.r.restoredProc(rec).opts.Runaway)
}
