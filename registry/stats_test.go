package registry

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
)

// The sampler on a scripted backend: the test sets what each tree costs
// and counts the TreeStats calls. The tests run in a synctest bubble, so
// the paces they check are the registry's own in fake time.

// statsEnv is an envtest.StatsFake with a health check the test sets.
type statsEnv struct {
	*envtest.StatsFake

	mu     sync.Mutex
	health env.Health
}

var (
	_ env.TreeStatter   = (*statsEnv)(nil)
	_ env.HealthChecker = (*statsEnv)(nil)
)

func (e *statsEnv) Health(context.Context) env.Health {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.health
}

func (e *statsEnv) setHealth(h env.Health) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.health = h
}

// statsFixture is a registry with a backend that measures ("measured")
// and one that cannot ("plain").
type statsFixture struct {
	r     *Registry
	env   *statsEnv
	plain *envtest.Fake
}

func newStatsFixture(t *testing.T) *statsFixture {
	t.Helper()
	f := &statsFixture{
		env:   &statsEnv{StatsFake: envtest.NewStatsFake(newFakeEnv()), health: env.Health{Condition: env.ConditionOK}},
		plain: newFakeEnv(),
	}
	r, err := New(Config{
		Open: func(ctx context.Context, target string) (env.Environment, error) {
			switch target {
			case "measured":
				return f.env, nil
			case "plain":
				return f.plain, nil
			}
			return nil, fmt.Errorf("unknown target %q", target)
		},
		DefaultBackend: "measured",
		DefaultGrace:   time.Second,
		Logger:         slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	f.r = r
	t.Cleanup(func() { r.Close() })
	return f
}

func (f *statsFixture) start(t *testing.T, backend string) (Info, *envtest.FakeProcess) {
	t.Helper()
	fe := f.env.Fake
	if backend == "plain" {
		fe = f.plain
	}
	in, err := f.r.Start(ctxT(t), StartOptions{Backend: backend, Command: "work"})
	require.NoError(t, err)
	return in, fe.Last()
}

// callsFor counts the TreeStats calls that asked about pid.
func (f *statsFixture) callsFor(pid int) int {
	n := 0
	for _, c := range f.env.StatsCalls() {
		if slices.Contains(c, pid) {
			n++
		}
	}
	return n
}

// rounds counts the TreeStats calls that asked about some process.
func (f *statsFixture) rounds() int {
	n := 0
	for _, c := range f.env.StatsCalls() {
		if len(c) > 0 {
			n++
		}
	}
	return n
}

func (f *statsFixture) report(t *testing.T, id string) StatsReport {
	t.Helper()
	rep, err := f.r.Stats(ctxT(t), id)
	require.NoError(t, err)
	return rep
}

// TestStatsPacing: every second through the first minute; then, quiet,
// every 2, 4, 8 and 10 s; busy again (CPU), every second; once the tree
// is gone, never.
func TestStatsPacing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newStatsFixture(t)
		in, p := f.start(t, "measured")
		f.env.SetStats(p, env.TreeStats{CPU: time.Second, RSS: 100 << 20, Pids: 1})
		// The sampler ticks on whole seconds from the start; looking at
		// half seconds keeps each tick on one side of a look.
		settle(500 * time.Millisecond)

		var at []int // the seconds since the start at which a sample came
		seen := 0
		var gaps []int
		last := 0
		for s := 1; s <= 115; s++ {
			settle(time.Second)
			if n := f.callsFor(in.PID); n > seen {
				require.Equal(t, seen+1, n, "at most one call per round for a process")
				seen = n
				gaps = append(gaps, s-last)
				at, last = append(at, s), s
			}
		}
		require.GreaterOrEqual(t, len(at), 60)
		for i, g := range gaps[:60] {
			assert.Equal(t, 1, g, "sample %d of a young process comes a second after the last", i+1)
		}
		assert.Equal(t, []int{2, 4, 8, 10, 10, 10, 10}, gaps[60:], "a quiet process is sampled ever less often, down to every 10 s")

		// Busy: half a core. The next sample finds out, and then every
		// second.
		cpu := time.Second
		busyFrom := len(at)
		for s := 116; s <= 140; s++ {
			cpu += 500 * time.Millisecond
			f.env.SetStats(p, env.TreeStats{CPU: cpu, RSS: 100 << 20, Pids: 1})
			settle(time.Second)
			if n := f.callsFor(in.PID); n > seen {
				seen = n
				gaps = append(gaps, s-last)
				at, last = append(at, s), s
			}
		}
		require.Greater(t, len(gaps), busyFrom+2)
		for _, g := range gaps[busyFrom+1:] {
			assert.Equal(t, 1, g, "a busy process is sampled every second")
		}
		rep := f.report(t, in.ID)
		require.NotNil(t, rep.Stats)
		assert.InDelta(t, 50.0, rep.Stats.CPUPercent, 0.01)

		// Ended, nothing left: no more calls about it.
		p.Exit(env.Exited(0))
		_, err := f.r.WaitTree(ctxT(t), in.ID, 0)
		require.NoError(t, err)
		settle(time.Second)
		calls := f.callsFor(in.PID)
		settle(30 * time.Second)
		assert.Equal(t, calls, f.callsFor(in.PID), "a finished tree is not sampled")
		got, err := f.r.Get(ctxT(t), in.ID)
		require.NoError(t, err)
		if assert.NotNil(t, got.Stats) {
			assert.Zero(t, got.Stats.RSSBytes, "a finished tree holds no memory")
			assert.Equal(t, int64(100<<20), got.Stats.PeakRSSBytes, "but what it held at most stays")
		}
	})
}

// TestStatsFigures: CPU percent from two samples, the peak kept while
// memory shrinks, Info and the report agreeing, reads and writes passed
// on.
func TestStatsFigures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newStatsFixture(t)
		in, p := f.start(t, "measured")
		got, err := f.r.Get(ctxT(t), in.ID)
		require.NoError(t, err)
		assert.Nil(t, got.Stats, "no figures before the first sample")
		assert.Empty(t, f.report(t, in.ID).Unsupported, "a backend that measures is not unsupported")

		f.env.SetStats(p, env.TreeStats{CPU: 2 * time.Second, RSS: 100 << 20, Pids: 3, ReadBytes: 10, WriteBytes: 20})
		settle(time.Second + 500*time.Millisecond)
		rep := f.report(t, in.ID)
		require.NotNil(t, rep.Stats)
		assert.Zero(t, rep.Stats.CPUPercent, "one sample tells no rate")
		assert.Equal(t, 2.0, rep.Stats.CPUSeconds)
		assert.Equal(t, int64(100<<20), rep.Stats.RSSBytes)
		assert.Equal(t, 3, rep.Stats.Pids)
		assert.Equal(t, int64(10), rep.Stats.ReadBytes)
		assert.Equal(t, int64(20), rep.Stats.WriteBytes)
		assert.True(t, time.Now().Add(-500*time.Millisecond).Equal(rep.Stats.SampledAt), "sampled at the round, %s", rep.Stats.SampledAt)

		// 3 s of CPU in one second of wall time: three cores.
		f.env.SetStats(p, env.TreeStats{CPU: 5 * time.Second, RSS: 300 << 20, Pids: 3})
		settle(time.Second)
		rep = f.report(t, in.ID)
		assert.InDelta(t, 300.0, rep.Stats.CPUPercent, 0.01)
		assert.Equal(t, int64(300<<20), rep.Stats.PeakRSSBytes)

		// Less memory, and less CPU than before (members ended): the peak
		// stays, the share is no negative number.
		f.env.SetStats(p, env.TreeStats{CPU: 4 * time.Second, RSS: 200 << 20, Pids: 2})
		settle(time.Second)
		rep = f.report(t, in.ID)
		assert.Zero(t, rep.Stats.CPUPercent)
		assert.Equal(t, int64(200<<20), rep.Stats.RSSBytes)
		assert.Equal(t, int64(300<<20), rep.Stats.PeakRSSBytes)
		require.Len(t, rep.History, 3)
		assert.Equal(t, []int64{100 << 20, 300 << 20, 200 << 20},
			[]int64{rep.History[0].RSSBytes, rep.History[1].RSSBytes, rep.History[2].RSSBytes}, "oldest first")
		assert.InDelta(t, 300.0, rep.History[1].CPUPercent, 0.01)

		list := listed(t, f.r, ListOptions{})
		require.Len(t, list, 1)
		assert.Equal(t, rep.Stats, list[0].Stats, "a listing shows the last sample")
		got, err = f.r.Get(ctxT(t), in.ID)
		require.NoError(t, err)
		assert.Equal(t, rep.Stats, got.Stats)
	})
}

// TestStatsHistoryBound: a process sampled every second for longer than
// ten minutes keeps the last ten minutes, 600 samples, oldest first.
func TestStatsHistoryBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newStatsFixture(t)
		in, p := f.start(t, "measured")
		settle(500 * time.Millisecond)
		cpu := time.Duration(0)
		for range 700 {
			cpu += 100 * time.Millisecond // 10 %: busy, so every second
			f.env.SetStats(p, env.TreeStats{CPU: cpu, RSS: 1 << 20, Pids: 1})
			settle(time.Second)
		}
		rep := f.report(t, in.ID)
		require.Len(t, rep.History, statsHistoryMax)
		assert.True(t, rep.History[0].At.After(time.Now().Add(-statsHistory)), "nothing older than ten minutes")
		assert.True(t, slices.IsSortedFunc(rep.History, func(a, b StatsSample) int { return a.At.Compare(b.At) }), "oldest first")
		assert.True(t, rep.Stats.SampledAt.Equal(rep.History[len(rep.History)-1].At), "the last sample last")
	})
}

// TestStatsOneCallPerRound: the processes of a backend are measured in
// one call per round; those of another backend are never in it.
func TestStatsOneCallPerRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newStatsFixture(t)
		var pids []int
		for range 5 {
			in, _ := f.start(t, "measured")
			pids = append(pids, in.PID)
		}
		_, _ = f.start(t, "plain")
		settle(500 * time.Millisecond)
		for round := 1; round <= 3; round++ {
			settle(time.Second)
			assert.Equal(t, round, f.rounds(), "one call per round")
		}
		for _, c := range f.env.StatsCalls() {
			if len(c) > 0 {
				assert.ElementsMatch(t, pids, c, "every due process of the backend, in one call")
			}
		}
	})
}

// TestStatsSickBackendSkipped: while a health check finds the backend not
// answering, no round asks it; once it answers, rounds resume.
func TestStatsSickBackendSkipped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newStatsFixture(t)
		in, _ := f.start(t, "measured")
		settle(1500 * time.Millisecond)
		require.Equal(t, 1, f.callsFor(in.PID))

		f.env.setHealth(env.Health{Condition: env.ConditionPaused, Detail: "container c is paused"})
		settle(healthEvery) // the prober's next check finds it
		calls := f.callsFor(in.PID)
		settle(20 * time.Second)
		assert.Equal(t, calls, f.callsFor(in.PID), "a paused backend is not asked")

		f.env.setHealth(env.Health{Condition: env.ConditionOK})
		settle(healthEveryBad)
		settle(2 * time.Second)
		assert.Greater(t, f.callsFor(in.PID), calls, "rounds resume once it answers")
	})
}

// TestStatsFailedCallKeepsPace: a call that fails leaves the figures as
// they were, and the next round asks again.
func TestStatsFailedCallKeepsPace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newStatsFixture(t)
		in, p := f.start(t, "measured")
		f.env.SetStats(p, env.TreeStats{CPU: time.Second, RSS: 1 << 20, Pids: 1})
		settle(1500 * time.Millisecond)
		before := f.report(t, in.ID).Stats
		require.NotNil(t, before)

		f.env.SetStatsError(fmt.Errorf("the engine said no"))
		settle(3 * time.Second)
		assert.Equal(t, before, f.report(t, in.ID).Stats, "a failed call changes nothing")
		f.env.SetStatsError(nil)
		settle(2 * time.Second)
		assert.True(t, f.report(t, in.ID).Stats.SampledAt.After(before.SampledAt), "sampled again")
	})
}

// TestStatsUnsupported: a backend that cannot measure, or a wrapper whose
// environment cannot, says so in one line and is never asked again.
func TestStatsUnsupported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newStatsFixture(t)
		in, _ := f.start(t, "plain")
		settle(2 * time.Second)
		rep := f.report(t, in.ID)
		assert.Nil(t, rep.Stats)
		assert.Equal(t, "backend plain cannot measure its processes", rep.Unsupported)

		f.env.SetStatsError(fmt.Errorf("the wrapped backend does not: %w", env.ErrUnsupported))
		m, _ := f.start(t, "measured")
		settle(2 * time.Second)
		calls := len(f.env.StatsCalls())
		assert.Equal(t, "backend measured cannot measure its processes", f.report(t, m.ID).Unsupported)
		settle(10 * time.Second)
		assert.Equal(t, calls, len(f.env.StatsCalls()), "not asked again")
	})
}
