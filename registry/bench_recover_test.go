//go:build linux

package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
)

// recoverBenchProcs is how many finished processes the restart benchmark
// recovers, each with recoverBenchOutput bytes of output.
const (
	recoverBenchProcs  = 1000
	recoverBenchOutput = 64 << 10
)

// recoverBenchRegistry is a registry on the local Environment of envDir
// (detached processes, as the daemon runs them) with stateFile as its
// checkpoint.
func recoverBenchRegistry(b *testing.B, envDir, stateFile string) *Registry {
	b.Helper()
	r, err := New(Config{
		Open: func(ctx context.Context, target string) (env.Environment, error) {
			return local.New(local.Options{StateDir: envDir, Logger: slog.New(slog.DiscardHandler)})
		},
		MaxProcesses: 2 * recoverBenchProcs,
		Logger:       slog.New(slog.DiscardHandler),
		StateFile:    stateFile,
	})
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// finishedStateFile runs n detached processes that each write size bytes
// and end, and returns the environment's state directory and the state
// file that lists them, for restarts to recover.
func finishedStateFile(b *testing.B, n, size int) (envDir, stateFile string) {
	b.Helper()
	envDir, stateFile = b.TempDir(), filepath.Join(b.TempDir(), "state.json")
	r := recoverBenchRegistry(b, envDir, stateFile)
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := r.Recover(ctx); err != nil {
		b.Fatal(err)
	}
	cmd := "true"
	if size > 0 {
		cmd = fmt.Sprintf("yes corral-recover-benchmark | head -c %d", size)
	}
	var (
		wg   sync.WaitGroup
		next = make(chan int)
		mu   sync.Mutex
		errs []error
	)
	for range 8 {
		wg.Go(func() {
			for range next {
				in, err := r.Start(ctx, StartOptions{Command: cmd})
				if err == nil && !in.Detached {
					err = fmt.Errorf("%s was not detached", in.ID)
				}
				if err == nil {
					in, err = r.Wait(ctx, in.ID, 0)
				}
				if err == nil && (in.State != StateExited || in.OutputBytes != int64(size)) {
					err = fmt.Errorf("%s: %s with %d bytes of output, want exited with %d", in.ID, in.State, in.OutputBytes, size)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		b.Fatalf("%d of %d starts failed, the first: %v", len(errs), n, errs[0])
	}
	if err := r.Checkpoint(); err != nil {
		b.Fatal(err)
	}
	return envDir, stateFile
}

// BenchmarkRecoverFinished is a daemon restart that finds
// recoverBenchProcs finished detached processes in its state file (the
// ps history of a busy day): New, then Recover, with every process listed
// afterwards. corral: each wrote recoverBenchOutput bytes; empty: each
// wrote nothing, so what is left is the cost of the records themselves;
// baseline: reading and parsing the state file alone, the floor of any
// restart. retained-MiB is the heap the recovered registry keeps.
func BenchmarkRecoverFinished(b *testing.B) {
	// Set up once for all sub-benchmarks: each start costs milliseconds.
	type fixture struct{ envDir, stateFile string }
	fixtures := map[int]fixture{}
	setup := func(size int) fixture {
		f, ok := fixtures[size]
		if !ok {
			f.envDir, f.stateFile = finishedStateFile(b, recoverBenchProcs, size)
			fixtures[size] = f
		}
		return f
	}
	restart := func(b *testing.B, size int) {
		f := setup(size)
		ctx := context.Background()
		var retained float64
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			before := heapAlloc()
			b.StartTimer()
			r := recoverBenchRegistry(b, f.envDir, f.stateFile)
			rep, err := r.Recover(ctx)
			if err != nil || rep.Restored[StateExited] != recoverBenchProcs {
				b.Fatalf("Recover = %+v, %v", rep, err)
			}
			if got, err := r.List(ctx, ListOptions{All: true}); err != nil || len(got) != recoverBenchProcs || got[0].OutputBytes != int64(size) {
				b.Fatalf("List: %d processes, %v", len(got), err)
			}
			b.StopTimer()
			retained = float64(int64(heapAlloc())-int64(before)) / (1 << 20)
			r.Close()
			b.StartTimer()
		}
		b.ReportMetric(retained, "retained-MiB")
	}
	b.Run("corral", func(b *testing.B) { restart(b, recoverBenchOutput) })
	b.Run("empty", func(b *testing.B) { restart(b, 0) })
	b.Run("baseline", func(b *testing.B) {
		f := setup(recoverBenchOutput)
		b.ReportAllocs()
		for b.Loop() {
			data, err := os.ReadFile(f.stateFile)
			if err != nil {
				b.Fatal(err)
			}
			var cf checkpointFile
			if err := json.Unmarshal(data, &cf); err != nil || len(cf.Processes) != recoverBenchProcs {
				b.Fatalf("state file: %d processes, %v", len(cf.Processes), err)
			}
		}
	})
}
