package registry

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
)

// attachedOnly hides Reattach so the benchmark's processes run as plain
// children: the benchmark measures the registry, not env/local's
// per-process shim.
type attachedOnly struct{ env.Environment }

func (a attachedOnly) Capabilities() env.Capabilities {
	c := a.Environment.Capabilities()
	c.Reattach = false
	return c
}

const benchProcs = 1000

func benchRegistry(b *testing.B, maxProcs int) *Registry {
	b.Helper()
	return localBenchRegistry(b, maxProcs, false)
}

// localBenchRegistry is a registry on one local Environment for a
// benchmark, cleaned up with it. With detach false, Start never detaches
// (attachedOnly): the foreground path, without the shim server.
func localBenchRegistry(b *testing.B, maxProcs int, detach bool) *Registry {
	b.Helper()
	stateDir := b.TempDir()
	r, err := New(Config{
		Open: func(ctx context.Context, target string) (env.Environment, error) {
			e, err := local.New(local.Options{StateDir: stateDir, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				return nil, err
			}
			if detach {
				return e, nil
			}
			return attachedOnly{e}, nil
		},
		MaxProcesses: maxProcs,
		DefaultGrace: time.Second,
		Logger:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		r.KillAll(ctx, KillAllOptions{Signal: env.SIGKILL})
		r.Close()
	})
	return r
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// startSleepers starts benchProcs background sleep processes and reports
// the heap they cost per tracked process (registry plus env/local).
func startSleepers(b *testing.B, r *Registry) ([]string, float64) {
	b.Helper()
	ctx := context.Background()
	before := heapAlloc()
	ids := make([]string, benchProcs)
	m := marker()
	for i := range ids {
		in, err := r.Start(ctx, StartOptions{Command: "exec sleep " + m, Labels: map[string]string{"bench": "yes"}})
		if err != nil {
			b.Fatalf("start %d: %v", i, err)
		}
		ids[i] = in.ID
	}
	perProc := float64(int64(heapAlloc())-int64(before)) / benchProcs
	// The caller reports it after its timed loop: b.Loop drops metrics
	// reported before it.
	return ids, perProc
}

func BenchmarkList(b *testing.B) {
	b.Run("corral", func(b *testing.B) {
		r := benchRegistry(b, benchProcs+10)
		_, perProc := startSleepers(b, r)
		for b.Loop() {
			if got := listed(b, r, ListOptions{}); len(got) != benchProcs {
				b.Fatalf("List returned %d", len(got))
			}
		}
		b.ReportMetric(perProc, "bytes/proc")
	})
}

func BenchmarkPoll(b *testing.B) {
	b.Run("corral", func(b *testing.B) {
		r := benchRegistry(b, benchProcs+10)
		ids, perProc := startSleepers(b, r)
		ctx := context.Background()
		i := 0
		for b.Loop() {
			if _, err := r.Poll(ctx, ids[i%len(ids)], 0); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.ReportMetric(perProc, "bytes/proc")
	})
}

// heapPeak samples the heap until stopped and returns the maximum in MiB.
func heapPeak() (stop func() float64) {
	samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var peak uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(samples)
			peak = max(peak, samples[0].Value.Uint64())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() float64 {
		close(done)
		wg.Wait()
		return float64(peak) / (1 << 20)
	}
}

const ingestBytes = 1 << 30

var ingestCommand = fmt.Sprintf("head -c %d /dev/zero", ingestBytes)

func BenchmarkIngest(b *testing.B) {
	b.Run("corral", func(b *testing.B) {
		r := benchRegistry(b, 16)
		ctx := context.Background()
		b.SetBytes(ingestBytes)
		runtime.GC()
		stop := heapPeak()
		for b.Loop() {
			res, err := r.Run(ctx, RunOptions{StartOptions: StartOptions{Command: ingestCommand}})
			if err != nil || res.OutputBytes != ingestBytes {
				b.Fatalf("Run: %d bytes, %v", res.OutputBytes, err)
			}
			if err := r.Remove(ctx, res.ID); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(stop(), "heap-MiB")
	})
	b.Run("baseline", func(b *testing.B) {
		b.SetBytes(ingestBytes)
		runtime.GC()
		stop := heapPeak()
		for b.Loop() {
			cmd := exec.Command("/bin/sh", "-c", ingestCommand)
			out, err := cmd.StdoutPipe()
			if err != nil {
				b.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, out)
			if err != nil || n != ingestBytes {
				b.Fatalf("copied %d, %v", n, err)
			}
			if err := cmd.Wait(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(stop(), "heap-MiB")
	})
}
