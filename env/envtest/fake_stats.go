package envtest

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/corralhq/corral/env"
)

// StatsFake is a Fake that measures its trees (env.TreeStatter) with the
// figures the test sets, and records each TreeStats call, so that a test
// can check how often and how batched code under test asks. A plain Fake
// does not measure: code under test sees a backend that cannot.
//
//	fe := envtest.NewStatsFake(&envtest.Fake{})
//	// … the code under test starts p …
//	fe.SetStats(p, env.TreeStats{CPU: time.Second, RSS: 64 << 20, Pids: 2})
//
// TreeStats keeps env.TreeStatter's contract: one entry per process in
// order; nil for a handle that is not this Fake's, one released, or one
// whose tree is gone (the process ended and left no survivors); the
// figures set for the process otherwise (zero, with Pids counting the live
// members, when none were set). An error set with SetStatsError fails
// every call, as a backend that does not answer does.
type StatsFake struct {
	*Fake

	mu    sync.Mutex
	stats map[*fakeState]env.TreeStats
	calls [][]int
	err   error
}

var _ env.TreeStatter = (*StatsFake)(nil)

// NewStatsFake returns f measuring its trees.
func NewStatsFake(f *Fake) *StatsFake {
	return &StatsFake{Fake: f, stats: map[*fakeState]env.TreeStats{}}
}

// SetStats sets the figures TreeStats reports for p's tree from now on.
func (f *StatsFake) SetStats(p *FakeProcess, st env.TreeStats) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st.Missing = slices.Clone(st.Missing)
	f.stats[p.s] = st
}

// SetStatsError makes every TreeStats call fail with err (nil: answer
// again).
func (f *StatsFake) SetStatsError(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

// StatsCalls returns, for each TreeStats call so far, the PIDs it asked
// about (0 for a handle that is not this Fake's), in order.
func (f *StatsFake) StatsCalls() [][]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([][]int, len(f.calls))
	for i, c := range f.calls {
		out[i] = slices.Clone(c)
	}
	return out
}

// TreeStats reports the figures set for each of procs; see StatsFake.
func (f *StatsFake) TreeStats(ctx context.Context, procs []env.Process) ([]*env.TreeStats, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fake: tree stats: %w", err)
	}
	f.Fake.mu.Lock()
	ours := map[*fakeState]bool{}
	for _, s := range f.Fake.states {
		ours[s] = true
	}
	f.Fake.mu.Unlock()

	f.mu.Lock()
	defer f.mu.Unlock()
	pids := make([]int, len(procs))
	for i, p := range procs {
		if fp, ok := p.(*FakeProcess); ok && ours[fp.s] {
			pids[i] = fp.s.pid
		}
	}
	f.calls = append(f.calls, pids)
	if f.err != nil {
		return nil, fmt.Errorf("fake: tree stats: %w", f.err)
	}
	out := make([]*env.TreeStats, len(procs))
	for i, p := range procs {
		fp, ok := p.(*FakeProcess)
		if !ok || !ours[fp.s] || fp.check("tree stats") != nil {
			continue
		}
		fp.s.mu.Lock()
		live := len(fp.s.survivors)
		if !fp.s.isExited() {
			live++
		}
		fp.s.mu.Unlock()
		if live == 0 {
			continue // the tree is gone
		}
		st, set := f.stats[fp.s]
		if !set {
			st = env.TreeStats{Pids: live}
		}
		st.Missing = slices.Clone(st.Missing)
		out[i] = &st
	}
	return out, nil
}
