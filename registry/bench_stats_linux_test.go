//go:build linux

package registry

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The stats targets of #32, in make bench.

const (
	// statsSampledProcs is how many running processes the sampling cost
	// is measured with.
	statsSampledProcs = 100
	// statsWindow is the wall time each figure is measured over.
	statsWindow = 10 * time.Second
	// statsSettle is waited after the processes start, so that what
	// starting them costs (the engine tearing down execs, the shim
	// settling) falls before the window.
	statsSettle = 2 * time.Second
)

// statsBackends are the backends the stats benchmarks run on.
var statsBackends = []struct {
	name string
	new  func(tb testing.TB, disable bool, maxProcs int) *statsBackend
}{
	{"local", newLocalStats},
	{"docker", newDockerStats},
}

// BenchmarkStatsSampling100 is what sampling 100 running processes costs
// in CPU, as a percentage of one core (cpu-%): baseline is a registry with
// the sampler off (Config.DisableStats), corral the same with it on, each
// with statsSampledProcs sleeping processes, over statsWindow. The
// processes are younger than a minute, so each is sampled every second:
// the sampler's fastest pace, its most expensive. What is counted is
// everything sampling runs on (localCPU, dockerCPU: on docker, also the
// engine's daemons and the container's cgroup), so the baseline is not
// zero; sampling-cpu-% is corral's cpu-% minus the baseline's of the same
// run, the figure the targets (1 % local, 3 % docker) bound. samples/s
// confirms the sampler sampled every process every second.
func BenchmarkStatsSampling100(b *testing.B) {
	for _, be := range statsBackends {
		b.Run(be.name, func(b *testing.B) {
			// With -count N the baseline runs N times before corral does:
			// corral subtracts their mean.
			var baseSum float64
			baseRuns := 0
			b.Run("baseline", func(b *testing.B) {
				baseSum += statsSamplingCPU(b, be.new(b, true, 2*statsSampledProcs), false)
				baseRuns++
			})
			b.Run("corral", func(b *testing.B) {
				pct := statsSamplingCPU(b, be.new(b, false, 2*statsSampledProcs), true)
				if baseRuns == 0 {
					b.Fatalf("the baseline did not run: run both halves, -bench 'StatsSampling100/%s'", be.name)
				}
				b.ReportMetric(pct-baseSum/float64(baseRuns), "sampling-cpu-%")
			})
		})
	}
}

// statsSamplingCPU starts the processes, measures b.N windows and returns
// the mean cpu-%, which it also reports.
func statsSamplingCPU(b *testing.B, sb *statsBackend, sampling bool) float64 {
	ids := make([]string, statsSampledProcs)
	for i := range ids {
		// Sequential starts: the window must not begin while starts of
		// the engine are still settling, and concurrency buys nothing
		// here.
		ids[i] = sb.start(b, "exec sleep 3600").ID
	}
	if sampling {
		for _, id := range ids {
			sb.waitStats(b, id, "the first sample", func(*Stats) bool { return true })
		}
	}
	time.Sleep(statsSettle)
	var total, engine, self, wall time.Duration
	samples := 0
	for range b.N {
		e0 := sb.engine(b)
		c0, err := sb.cpu()
		if err != nil {
			b.Fatal(err)
		}
		s0 := ownCPU()
		t0 := time.Now()
		time.Sleep(statsWindow)
		self += ownCPU() - s0
		c1, err := sb.cpu()
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		engine += sb.engine(b) - e0
		total += c1 - c0
		wall += t1.Sub(t0)
		for _, id := range ids {
			rep, err := sb.r.Stats(context.Background(), id)
			if err != nil {
				b.Fatal(err)
			}
			if !sampling && (rep.Stats != nil || len(rep.History) > 0) {
				b.Fatalf("process %s has figures with the sampler off", id)
			}
			for _, s := range rep.History {
				if s.At.After(t0) && !s.At.After(t1) {
					samples++
				}
			}
		}
		if sampling && samples == 0 {
			b.Fatal("the sampler took no sample in the window")
		}
	}
	b.StopTimer()
	pct := 100 * float64(total) / float64(wall)
	b.ReportMetric(0, "ns/op") // the window's length, not a figure
	b.ReportMetric(pct, "cpu-%")
	// The parts of cpu-%: this process (the registry, the backend's
	// client) and, on docker, the engine's daemons; the rest is the
	// backend's own (the shim server, the container).
	b.ReportMetric(100*float64(self)/float64(wall), "test-cpu-%")
	if sb.engineCPU != nil {
		b.ReportMetric(100*float64(engine)/float64(wall), "engine-cpu-%")
	}
	b.ReportMetric(float64(samples)/wall.Seconds(), "samples/s")
	return pct
}

// engine is sb.engineCPU's figure, 0 without one.
func (sb *statsBackend) engine(b *testing.B) time.Duration {
	if sb.engineCPU == nil {
		return 0
	}
	c, err := sb.engineCPU()
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkStatsFreshness is how old the figures of a busy process are
// when read: a busy loop runs while Info is read at random moments (0 to
// 200 ms apart) over statsWindow; age-ms-p50 and age-ms-max are the
// median and largest now − SampledAt seen (target: at most 2 s).
func BenchmarkStatsFreshness(b *testing.B) {
	for _, be := range statsBackends {
		b.Run(be.name, func(b *testing.B) {
			sb := be.new(b, false, 16)
			id := sb.start(b, busyLoop).ID
			sb.waitStats(b, id, "the first sample", func(*Stats) bool { return true })
			var ages []time.Duration
			for range b.N {
				end := time.Now().Add(statsWindow)
				for time.Now().Before(end) {
					time.Sleep(rand.N(200 * time.Millisecond))
					ages = append(ages, time.Since(sb.stats(b, id).SampledAt))
				}
			}
			b.StopTimer()
			slices.Sort(ages)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(ms(ages[len(ages)/2]), "age-ms-p50")
			b.ReportMetric(ms(ages[len(ages)-1]), "age-ms-max")
		})
	}
}

// BenchmarkStatsBusyLoopShare is the share of a core a busy loop is seen
// using: the mean cpu_percent/100 of the samples taken over statsWindow
// (cpu-share; target 0.9 or more on an idle machine: on a loaded one the
// loop gets less), with the lowest sample's (cpu-share-min). Locally,
// kernel-cpu-share is the share the kernel counted for the loop over the
// same window, which tells a loaded machine from a wrong figure.
func BenchmarkStatsBusyLoopShare(b *testing.B) {
	for _, be := range statsBackends {
		b.Run(be.name, func(b *testing.B) {
			sb := be.new(b, false, 16)
			in := sb.start(b, busyLoop)
			id, leader := in.ID, in.PID
			first := sb.waitStats(b, id, "the first sample", func(*Stats) bool { return true })
			// The second sample is the first with a share.
			sb.waitStats(b, id, "the second sample", func(st *Stats) bool { return st.SampledAt.After(first.SampledAt) })
			var shares []float64
			var kernel, wall time.Duration
			for range b.N {
				k0 := sb.kernelCPU(b, leader)
				t0 := time.Now()
				time.Sleep(statsWindow)
				kernel += sb.kernelCPU(b, leader) - k0
				wall += time.Since(t0)
				rep, err := sb.r.Stats(context.Background(), id)
				if err != nil {
					b.Fatal(err)
				}
				for _, s := range rep.History {
					if s.At.After(t0) {
						shares = append(shares, s.CPUPercent/100)
					}
				}
			}
			b.StopTimer()
			if len(shares) == 0 {
				b.Fatal("no sample in the window")
			}
			var sum float64
			for _, s := range shares {
				sum += s
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(sum/float64(len(shares)), "cpu-share")
			b.ReportMetric(slices.Min(shares), "cpu-share-min")
			if sb.treeCPU != nil {
				b.ReportMetric(float64(kernel)/float64(wall), "kernel-cpu-share")
			}
		})
	}
}

// kernelCPU is sb.treeCPU's figure for leader, 0 without one.
func (sb *statsBackend) kernelCPU(b *testing.B, leader int) time.Duration {
	if sb.treeCPU == nil {
		return 0
	}
	c, err := sb.treeCPU(leader)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
