//go:build linux

package registry

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Follow's cost, as `corral logs -f`, the daemon's follow endpoint and the
// dashboard see it: how long a byte a command writes takes to reach a
// follower, and what following costs while nothing is written.
//
// Both benchmarks measure a fixed amount of work (samples, a window)
// however large b.N is: the figures are about a follower waiting, which
// b.N iterations would only repeat. Each is measured when the framework
// starts it (b.N is 1: every -count starts so) and reported again if the
// framework calls it with a larger b.N.

// followLatencySamples is how many bytes the latency benchmark sends; the
// gap before each varies over followMaxGap, so that a follower that backs
// off while the output is quiet is caught at every stage of its back-off,
// as a follower of a server that logs now and then is.
const (
	followLatencySamples = 30
	followMaxGap         = 500 * time.Millisecond
)

// followGap is the pause before sample i: spread over [0, followMaxGap)
// without a pattern a back-off could fall into step with.
func followGap(i int) time.Duration {
	return time.Duration(i*37%50) * followMaxGap / 50
}

var followResults sync.Map // benchmark name → []float64

// measured reports the figures measured at b's start, when the framework
// calls b again with a larger b.N.
func measured(b *testing.B, units ...string) bool {
	if b.N == 1 {
		return false
	}
	v, ok := followResults.Load(b.Name())
	if ok {
		for i, x := range v.([]float64) {
			b.ReportMetric(x, units[i])
		}
	}
	return ok
}

func report(b *testing.B, units []string, figures ...float64) {
	followResults.Store(b.Name(), figures)
	for i, x := range figures {
		b.ReportMetric(x, units[i])
	}
}

// fifoCat makes a FIFO in a temporary directory and returns its path and
// the command that copies it to its output: the benchmark writes a byte
// into the FIFO at a known time, and cat writes it out at once.
func fifoCat(b *testing.B) (path, command string) {
	b.Helper()
	path = filepath.Join(b.TempDir(), "in")
	if err := unix.Mkfifo(path, 0o600); err != nil {
		b.Fatal(err)
	}
	return path, "exec cat " + path
}

// sampleLatency writes one byte into w per sample, after the sample's
// gap, and returns each time from the write to the byte's arrival on got,
// in milliseconds.
func sampleLatency(b *testing.B, w *os.File, got <-chan time.Time) []float64 {
	b.Helper()
	lat := make([]float64, 0, followLatencySamples)
	for i := range followLatencySamples {
		time.Sleep(followGap(i))
		sent := time.Now()
		if _, err := w.Write([]byte{'x'}); err != nil {
			b.Fatal(err)
		}
		select {
		case at := <-got:
			lat = append(lat, float64(at.Sub(sent))/float64(time.Millisecond))
		case <-time.After(10 * time.Second):
			b.Fatalf("sample %d: the byte did not arrive within 10 s", i)
		}
	}
	return lat
}

// quantile returns the q-quantile of xs (sorted in place).
func quantile(xs []float64, q float64) float64 {
	slices.Sort(xs)
	return xs[min(len(xs)-1, int(q*float64(len(xs))))]
}

var latencyUnits = []string{"latency-ms", "latency-p90-ms", "latency-max-ms"}

func reportLatency(b *testing.B, lat []float64) {
	report(b, latencyUnits, quantile(lat, 0.5), quantile(lat, 0.9), quantile(lat, 1))
}

// BenchmarkFollowLatency measures the time from a byte written by a
// command on local (a detached process, as the daemon starts it) to the
// same byte handed to a Registry.Follow callback. The baseline is the same
// command under os/exec, its output read from the pipe: what the kernel
// and cat cost without a supervisor in between.
func BenchmarkFollowLatency(b *testing.B) {
	b.Run("corral", func(b *testing.B) {
		if measured(b, latencyUnits...) {
			return
		}
		r := localBenchRegistry(b, 16, true)
		path, command := fifoCat(b)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		in, err := r.Start(ctx, StartOptions{Command: command})
		if err != nil {
			b.Fatal(err)
		}
		// Opening blocks until cat has the FIFO open for reading.
		w, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		got := make(chan time.Time, followLatencySamples)
		var wg sync.WaitGroup
		wg.Go(func() {
			_, _ = r.Follow(ctx, in.ID, 0, func(pr PollResult) bool {
				for range pr.Output {
					got <- time.Now()
				}
				return true
			})
		})
		lat := sampleLatency(b, w, got)
		w.Close() // cat ends: the follower returns with the final state
		wg.Wait()
		reportLatency(b, lat)
	})
	b.Run("baseline", func(b *testing.B) {
		if measured(b, latencyUnits...) {
			return
		}
		path, command := fifoCat(b)
		cmd := exec.Command("/bin/sh", "-c", command)
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		w, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		got := make(chan time.Time, followLatencySamples)
		var wg sync.WaitGroup
		wg.Go(func() {
			buf := make([]byte, 64)
			for {
				n, err := out.Read(buf)
				for range n {
					got <- time.Now()
				}
				if err != nil {
					return
				}
			}
		})
		lat := sampleLatency(b, w, got)
		w.Close()
		wg.Wait()
		if err := cmd.Wait(); err != nil {
			b.Fatal(err)
		}
		reportLatency(b, lat)
	})
}

// followIdleProcs and followIdleWindow size the idle benchmark: a page
// of quiet servers, each with a follower, over a window long enough for
// a back-off to settle.
const (
	followIdleProcs  = 100
	followIdleWindow = 10 * time.Second
)

// selfCPU is the CPU time (user and system) this process used so far.
func selfCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// idleCPU returns the CPU this process uses over followIdleWindow, in
// percent of one CPU.
func idleCPU(b *testing.B) float64 {
	before := selfCPU(b)
	time.Sleep(followIdleWindow)
	return 100 * float64(selfCPU(b)-before) / float64(followIdleWindow)
}

var idleUnits = []string{"cpu-%"}

// BenchmarkFollowIdleCPU measures the CPU the registry's process uses
// while followIdleProcs quiet processes run on local and each is
// followed: corral is the window with a follower on every process,
// baseline the same window on the same processes, measured just before,
// with no follower.
//
// The processes are not detached: env/local's stream of a detached
// process's log checks its shim now and then, a cost of its own (about 2%
// of a CPU for 100 processes, falling as its checks back off) that would
// drown the followers' in noise and differ between the two windows.
func BenchmarkFollowIdleCPU(b *testing.B) {
	r := localBenchRegistry(b, followIdleProcs+10, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := marker()
	ids := make([]string, followIdleProcs)
	for i := range ids {
		in, err := r.Start(ctx, StartOptions{Command: "exec sleep " + m})
		if err != nil {
			b.Fatalf("start %d: %v", i, err)
		}
		ids[i] = in.ID
	}
	// Let the starts' own work (checkpoints, watches armed) settle.
	time.Sleep(time.Second)
	b.Run("baseline", func(b *testing.B) {
		if !measured(b, idleUnits...) {
			report(b, idleUnits, idleCPU(b))
		}
	})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	b.Run("corral", func(b *testing.B) {
		if measured(b, idleUnits...) {
			return
		}
		for _, id := range ids {
			wg.Go(func() {
				_, _ = r.Follow(ctx, id, 0, func(PollResult) bool { return true })
			})
		}
		cpu := idleCPU(b)
		for _, id := range ids {
			if in, err := r.Get(ctx, id); err != nil || in.State != StateRunning {
				b.Fatalf("%s is %s after the window (%v): fewer processes were followed", id, in.State, err)
			}
		}
		report(b, idleUnits, cpu)
		b.Logf("%d followed processes, %s window: %.3f%% of one CPU", len(ids), followIdleWindow, cpu)
	})
}
