//go:build linux

package registry

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// Accuracy of the sampler's figures on the real backends, against what
// the system's own tools say (#32).

// holds200MB is a tree that holds about 200 MB resident: dd's buffer,
// filled from /dev/zero and kept while dd waits on a pipe sleep never
// reads.
const holds200MB = "dd if=/dev/zero bs=200M count=1 2>/dev/null | sleep 600"

// rssTolerance is how far corral's RSS may be from ps's: ps reads the
// same /proc figures, and a tree that holds still differs only by what
// its shell and sleep have in pages.
const rssTolerance = 0.10

func TestStatsRSSMatchesPSLocal(t *testing.T) {
	testStatsRSSMatchesPS(t, newLocalStats(t, false, 16))
}

func TestStatsRSSMatchesPSDocker(t *testing.T) {
	testStatsRSSMatchesPS(t, newDockerStats(t, false, 16))
}

// testStatsRSSMatchesPS: the tree's RSS in Info.Stats is within 10 % of
// ps summed over the tree, read just before and just after the sample.
func testStatsRSSMatchesPS(t *testing.T, sb *statsBackend) {
	in := sb.start(t, holds200MB)
	sb.waitStats(t, in.ID, "the tree holding 200 MB", func(st *Stats) bool { return st.RSSBytes >= 190<<20 })
	var last string
	for range 5 {
		before := sb.psTreeRSS(t, in.PID)
		asked := time.Now()
		st := sb.waitStats(t, in.ID, "a sample after ps", func(st *Stats) bool { return st.SampledAt.After(asked) })
		after := sb.psTreeRSS(t, in.PID)
		if math.Abs(float64(before-after)) > 0.01*float64(after) {
			// The tree changed between the looks: no moment to compare.
			last = fmt.Sprintf("ps %d then %d", before, after)
			continue
		}
		ps := (before + after) / 2
		if ps < 150<<20 {
			t.Fatalf("ps says the tree holds %d bytes, not about 200 MB: the test's command did not work", ps)
		}
		if diff := math.Abs(float64(st.RSSBytes-ps)) / float64(ps); diff > rssTolerance {
			t.Fatalf("rss_bytes %d, ps %d: %.1f %% apart, want within %.0f %%", st.RSSBytes, ps, 100*diff, 100*rssTolerance)
		}
		t.Logf("rss_bytes %d, ps %d", st.RSSBytes, ps)
		return
	}
	t.Fatalf("the tree's RSS never held still between two ps looks: %s", last)
}

func TestStatsBusyLoopShareLocal(t *testing.T) {
	testStatsBusyLoopShare(t, newLocalStats(t, false, 16))
}

func TestStatsBusyLoopShareDocker(t *testing.T) {
	testStatsBusyLoopShare(t, newDockerStats(t, false, 16))
}

// busySlack is the cpu_percent above one core a single-threaded loop may
// show: a share is CPU time over the wall time between two samples, and
// the wall time is taken when the backend's answer arrives, so the
// answer's delay varying from one round to the next (a loaded machine, a
// round trip into a container) moves a share by that variation over the
// round.
const busySlack = 25.0

// testStatsBusyLoopShare: a loop on one core never shows more than one
// core (plus busySlack) over several samples; that it shows close to one
// core is BenchmarkStatsBusyLoopShare's figure, since a loaded machine
// may give it less.
func testStatsBusyLoopShare(t *testing.T, sb *statsBackend) {
	in := sb.start(t, busyLoop)
	first := sb.waitStats(t, in.ID, "the first sample", func(*Stats) bool { return true })
	var shares []float64
	prev := first.SampledAt
	for len(shares) < 6 {
		st := sb.waitStats(t, in.ID, "the next sample", func(st *Stats) bool { return st.SampledAt.After(prev) })
		prev = st.SampledAt
		shares = append(shares, st.CPUPercent)
		if st.CPUPercent > 100+busySlack {
			t.Fatalf("cpu_percent %.1f of a loop on one core, want at most %.0f; samples so far %v", st.CPUPercent, 100+busySlack, shares)
		}
	}
	// A sampler that measured nothing would pass the bound above.
	var sum float64
	for _, s := range shares {
		sum += s
	}
	if mean := sum / float64(len(shares)); mean < 10 {
		t.Fatalf("cpu_percent of a busy loop averages %.1f over %v: the loop is not seen", mean, shares)
	}
	t.Logf("cpu_percent of a busy loop: %v", shares)
}
