package registry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/corralhq/corral/env"
)

// Stats: what each running process tree costs (CPU, memory, processes,
// storage I/O), sampled in the background so that a listing shows it
// without asking any backend.
//
// One sampler per opened backend whose environment measures trees
// (env.TreeStatter) wakes every statsTick and makes one batched TreeStats
// call, bounded by statsTimeout, for the running processes of that backend
// whose next sample is due: a listing of fifty processes costs one round
// trip into a sandbox per round, never fifty. A round is skipped while a
// health check or an observation says the backend does not answer.
//
// Each process is paced by what it costs, as readiness looks are: every
// statsTick while young (statsYoung) or busy (cpu_percent at least
// statsBusyCPU, or resident memory grown by statsBusyRSS since the last
// sample), the pace doubling while it stays quiet up to statsMaxEvery. A
// process whose tree has ended is not sampled. The last statsHistory of
// samples are kept per process in a ring of at most statsHistoryMax.

const (
	// statsTick is the sampler's round and the fastest pace.
	statsTick = time.Second
	// statsMaxEvery is the slowest pace, for a quiet process.
	statsMaxEvery = 10 * time.Second
	// statsTimeout bounds one round's TreeStats call.
	statsTimeout = 2 * time.Second
	// statsYoung: a process younger than this is sampled every statsTick
	// (a start is when its cost changes most).
	statsYoung = time.Minute
	// statsBusyCPU is the cpu_percent from which a process counts as busy.
	statsBusyCPU = 5.0
	// statsBusyRSS is the growth of resident memory between two samples
	// from which a process counts as busy (0.1: 10 %).
	statsBusyRSS = 0.1
	// statsHistory is how far back Registry.Stats's history goes.
	statsHistory = 10 * time.Minute
	// statsHistoryMax bounds the samples kept per process: statsHistory
	// at the fastest pace.
	statsHistoryMax = int(statsHistory / statsTick)
)

// Stats is what a process's tree costs, from the registry's last sample.
type Stats struct {
	// CPUPercent is the tree's CPU use between the last two samples as a
	// share of one core: 100 is one full core, and it exceeds 100 on
	// several. 0 after the first sample.
	CPUPercent float64 `json:"cpu_percent"`
	// CPUSeconds is the CPU time the tree has used, user plus system, as
	// the backend counts it (its live members and the children they
	// reaped).
	CPUSeconds float64 `json:"cpu_seconds"`
	// RSSBytes is the resident memory of the tree's live members.
	RSSBytes int64 `json:"rss_bytes"`
	// PeakRSSBytes is the largest RSSBytes any sample saw.
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	// Pids is how many processes of the tree are alive.
	Pids int `json:"pids"`
	// ReadBytes and WriteBytes are what the tree's live members read from
	// and wrote to storage, where the backend can tell.
	ReadBytes  int64 `json:"read_bytes,omitempty"`
	WriteBytes int64 `json:"write_bytes,omitempty"`
	// SampledAt is when the figures were taken.
	SampledAt time.Time `json:"sampled_at"`
}

// StatsSample is one point of a process's recent cost.
type StatsSample struct {
	At         time.Time `json:"at"`
	CPUPercent float64   `json:"cpu_percent"`
	RSSBytes   int64     `json:"rss_bytes"`
	Pids       int       `json:"pids"`
}

// StatsReport is a process's cost now and over the last ten minutes.
type StatsReport struct {
	ID string `json:"id"`
	// Stats is the last sample; nil before the first one.
	Stats *Stats `json:"stats,omitempty"`
	// History holds the samples of the last statsHistory, oldest first.
	History []StatsSample `json:"history,omitempty"`
	// Unsupported says why there are no figures when the backend cannot
	// measure its processes ("backend X cannot measure its processes").
	Unsupported string `json:"unsupported,omitempty"`
}

// procStats is what the sampler knows of one process's tree. Its own
// lock guards it: infoLocked reads it under proc.mu, the sampler writes it
// without proc.mu.
type procStats struct {
	mu      sync.Mutex
	last    *Stats
	cpu     time.Duration // the cumulative CPU of the last sample
	next    time.Time     // when the next sample is due; zero: at once
	every   time.Duration // the current pace
	history []StatsSample // a ring of at most statsHistoryMax
	head    int           // where the oldest sample is once the ring is full
	prevAt  time.Time     // when the sample before last was taken
	rw      runawayState  // runaway.go
}

// due reports whether a sample is due in the round that starts at now.
// Rounds come every statsTick and a pace counts from when the backend
// answered, a little after its round began: a sample due before the next
// round's midpoint is taken in this one, or every pace would lose a whole
// tick to the call's own duration (a young process sampled every 2 s).
func (s *procStats) due(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !now.Add(statsTick / 2).Before(s.next)
}

// postpone sets the next sample one pace from now, after a round that got
// no figures for the process.
func (s *procStats) postpone(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next = now.Add(max(s.every, statsTick))
}

// record takes the figures st, sampled at now, of a process that started
// at started, and sets the pace of the next sample.
func (s *procStats) record(st *env.TreeStats, now, started time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := &Stats{
		CPUSeconds: st.CPU.Seconds(),
		RSSBytes:   st.RSS,
		Pids:       st.Pids,
		ReadBytes:  st.ReadBytes,
		WriteBytes: st.WriteBytes,
		SampledAt:  now,
	}
	busy := false
	if prev := s.last; prev != nil {
		if wall := now.Sub(prev.SampledAt); wall > 0 {
			// A tree whose members ended counts less CPU than before: that
			// is no use of a negative share.
			cur.CPUPercent = math.Round(max(float64(st.CPU-s.cpu), 0)/float64(wall)*1000) / 10
		}
		cur.PeakRSSBytes = prev.PeakRSSBytes
		busy = cur.CPUPercent >= statsBusyCPU ||
			prev.RSSBytes > 0 && float64(cur.RSSBytes-prev.RSSBytes) >= statsBusyRSS*float64(prev.RSSBytes)
	}
	cur.PeakRSSBytes = max(cur.PeakRSSBytes, cur.RSSBytes)
	if s.last != nil {
		s.prevAt = s.last.SampledAt
	}
	s.last, s.cpu = cur, st.CPU
	if busy || s.every == 0 || now.Sub(started) < statsYoung {
		s.every = statsTick
	} else {
		s.every = min(2*s.every, statsMaxEvery)
	}
	s.next = now.Add(s.every)
	sample := StatsSample{At: now, CPUPercent: cur.CPUPercent, RSSBytes: cur.RSSBytes, Pids: cur.Pids}
	if len(s.history) < statsHistoryMax {
		s.history = append(s.history, sample)
		return
	}
	s.history[s.head] = sample
	s.head = (s.head + 1) % statsHistoryMax
}

// current is the last sample as Info shows it: nil before the first; for a
// tree that no longer runs, what it used in all (CPU time, peak memory)
// with nothing live.
func (s *procStats) current(treeRunning bool) *Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		return nil
	}
	st := *s.last
	if !treeRunning {
		st.CPUPercent, st.RSSBytes, st.Pids = 0, 0, 0
	}
	return &st
}

// recent is the samples since now minus statsHistory, oldest first.
func (s *procStats) recent(now time.Time) []StatsSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	from := now.Add(-statsHistory)
	var out []StatsSample
	for i := range s.history {
		if sm := s.history[(s.head+i)%len(s.history)]; sm.At.After(from) {
			out = append(out, sm)
		}
	}
	return out
}

// Stats returns what the process idOrPrefix costs now and its samples of
// the last ten minutes, as the sampler last took them: it never asks the
// backend. A process without figures has Stats nil, and Unsupported says
// why when its backend cannot measure processes.
func (r *Registry) Stats(_ context.Context, idOrPrefix string) (StatsReport, error) {
	p, err := r.lookup(idOrPrefix)
	if err != nil {
		return StatsReport{}, err
	}
	in := p.info()
	rep := StatsReport{ID: p.id, Stats: in.Stats, History: p.stats.recent(time.Now())}
	if rep.Stats == nil && r.cannotMeasure(p.backend) {
		rep.Unsupported = fmt.Sprintf("backend %s cannot measure its processes", p.backend)
	}
	return rep, nil
}

// cannotMeasure reports whether target's open environment is known not
// to measure trees; false while it is not open (nothing is known).
func (r *Registry) cannotMeasure(target string) bool {
	slot := r.slotOf(target)
	if slot == nil {
		return false
	}
	_, ok := slot.env.(env.TreeStatter)
	return !ok || slot.statsUnsupported.Load()
}

// watchStats starts the sampler of a newly opened environment that
// measures trees. Called once per slot, with watchHealth.
func (r *Registry) watchStats(target string, slot *envSlot) {
	ts, ok := slot.env.(env.TreeStatter)
	if !ok || r.cfg.DisableStats {
		return
	}
	r.goTracked(func() { r.sampleLoop(target, slot, ts) })
}

func (r *Registry) sampleLoop(target string, slot *envSlot, ts env.TreeStatter) {
	// A wrapper (the daemon's) offers the call whatever it wraps: an
	// empty call tells at once whether anything measures, so that Stats
	// can say so before the first round.
	ctx, cancel := context.WithTimeout(r.ctx, statsTimeout)
	_, err := ts.TreeStats(ctx, nil)
	cancel()
	if errors.Is(err, env.ErrUnsupported) {
		slot.statsUnsupported.Store(true)
		return
	}
	r.everyTick(target, slot, statsTick, func() bool {
		if r.sampleRound(target, ts) {
			return true
		}
		slot.statsUnsupported.Store(true)
		r.log.Debug("the backend measures no process trees", "backend", target)
		return false
	})
}

// everyTick calls round every tick while slot is target's environment
// and the registry runs, until round returns false: the pace of a
// backend's background looks (stats, input waits).
func (r *Registry) everyTick(target string, slot *envSlot, tick time.Duration, round func() bool) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		r.mu.Lock()
		current := r.envs[target] == slot
		r.mu.Unlock()
		if !current || !round() {
			return // the environment was replaced (reopened) or dropped, or the round said so
		}
	}
}

// sampleRound samples target's running processes whose sample is due,
// in one TreeStats call. It reports false when the backend said it cannot
// measure (a wrapper that offers the call over an environment that
// does not): then no round is worth making again.
func (r *Registry) sampleRound(target string, ts env.TreeStatter) bool {
	if h, _ := r.condition(target); h.Condition != env.ConditionOK {
		return true // a backend that does not answer is not asked
	}
	now := time.Now()
	var procs []*proc
	var handles []env.Process
	for _, p := range r.selectProcs(ListOptions{Backend: target}) {
		if !p.mayRun() || !p.stats.due(now) {
			continue
		}
		if h := p.currentHandle(); h != nil {
			procs, handles = append(procs, p), append(handles, h)
		}
	}
	if len(procs) == 0 {
		return true
	}
	tctx, cancelTurn := context.WithTimeout(r.ctx, statsTimeout)
	defer cancelTurn()
	release, err := r.treeCallTurn(tctx, target)
	if err != nil {
		// The backend is busy with kills: measuring can wait a round.
		return true
	}
	defer release()
	// Neither callCtx nor observe: a round a second would ask for a
	// health check a second, and a sample late on a loaded machine is
	// no news worth showing as an unreachable backend. The prober alone
	// tells when to skip rounds.
	ctx, cancel := context.WithTimeout(r.ctx, statsTimeout)
	res, err := ts.TreeStats(ctx, handles)
	cancel()
	if r.ctx.Err() != nil {
		return true
	}
	if err == nil && len(res) != len(handles) {
		err = fmt.Errorf("TreeStats answered for %d processes, not %d", len(res), len(handles))
	}
	at := time.Now()
	if err != nil {
		if errors.Is(err, env.ErrUnsupported) {
			return false
		}
		r.log.Debug("stats of the trees", "backend", target, "err", err)
		for _, p := range procs {
			p.stats.postpone(at)
		}
		return true
	}
	for i, p := range procs {
		if res[i] == nil {
			// Not this backend's, or its tree is gone: the tree's end is
			// recorded elsewhere; ask again at the pace it had.
			p.stats.postpone(at)
			continue
		}
		p.stats.record(res[i], at, p.startedTime())
		p.checkRunaway()
	}
	return true
}
