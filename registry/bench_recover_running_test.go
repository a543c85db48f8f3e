//go:build linux

package registry

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
)

// slowAttach delays every Attach by d: a sandbox whose round trip is d
// (a docker exec or an ssh session on a loaded machine).
type slowAttach struct {
	env.Environment
	d time.Duration
}

func (s slowAttach) Attach(ctx context.Context, ref env.Ref) (env.Process, error) {
	select {
	case <-time.After(s.d):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Environment.Attach(ctx, ref)
}

// recoverRunningProcs is how many processes the running-recovery
// benchmark re-attaches: half still run, half ended while no supervisor
// ran (the shape of the daemon crash test).
const recoverRunningProcs = 20

// BenchmarkRecoverRunning is a restart that re-attaches
// recoverRunningProcs detached processes, of which half ended while no
// supervisor ran; it measures New+Recover. local: env/local.
// slow-attach: env/local with every Attach taking 300 ms, the round trip
// of a loaded sandbox (a docker exec, an ssh session); baseline: the same
// 300 ms once, what a restart must wait at least when every Attach runs
// in parallel, as Recover's do. slow-attach/baseline is about 1: no
// process waits for more than its Attach (an exit is known from what the
// handle read, see StartRecover); it was about 4 while Recover waited out
// an exit probe of three Attach durations per running process.
func BenchmarkRecoverRunning(b *testing.B) {
	const slow = 300 * time.Millisecond
	localOpen := func(dir string) func(context.Context, string) (env.Environment, error) {
		return func(ctx context.Context, target string) (env.Environment, error) {
			return local.New(local.Options{StateDir: dir, Logger: slog.New(slog.DiscardHandler)})
		}
	}
	run := func(b *testing.B, open func(dir string) func(context.Context, string) (env.Environment, error), reopen func(dir string) func(context.Context, string) (env.Environment, error)) {
		for b.Loop() {
			b.StopTimer()
			envDir, stateFile, flags := b.TempDir(), filepath.Join(b.TempDir(), "state.json"), b.TempDir()
			cfg := Config{Open: open(envDir), Logger: slog.New(slog.DiscardHandler), StateFile: stateFile, DefaultGrace: time.Second}
			r1, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if _, err := r1.Recover(ctx); err != nil {
				b.Fatal(err)
			}
			var ids []string
			for i := range recoverRunningProcs {
				cmd := fmt.Sprintf("seq 1 300; until [ -e %s/%d ] || ! [ -d %s ]; do sleep 0.05; done; seq 301 600", flags, i, flags)
				in, err := r1.Start(ctx, StartOptions{Command: cmd})
				if err != nil || !in.Detached {
					b.Fatalf("start: %+v %v", in, err)
				}
				ids = append(ids, in.ID)
			}
			r1.Close()
			for i := 0; i < recoverRunningProcs; i += 2 {
				os.WriteFile(filepath.Join(flags, fmt.Sprint(i)), nil, 0o600)
			}
			time.Sleep(500 * time.Millisecond) // the odd ones end while nobody watches
			cfg.Open = reopen(envDir)
			b.StartTimer()
			r2, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			rep, err := r2.Recover(ctx)
			b.StopTimer()
			if err != nil || rep.Restored[StateExited] != recoverRunningProcs/2 || rep.Restored[StateRunning] != recoverRunningProcs/2 {
				b.Fatalf("Recover = %+v %v", rep, err)
			}
			os.RemoveAll(flags) // the rest end
			for _, id := range ids {
				r2.Wait(ctx, id, 0)
			}
			r2.Close()
			b.StartTimer()
		}
	}
	b.Run("local", func(b *testing.B) { run(b, localOpen, localOpen) })
	b.Run("slow-attach", func(b *testing.B) {
		run(b, localOpen, func(dir string) func(context.Context, string) (env.Environment, error) {
			return func(ctx context.Context, target string) (env.Environment, error) {
				e, err := localOpen(dir)(ctx, target)
				return slowAttach{e, slow}, err
			}
		})
	})
	b.Run("baseline", func(b *testing.B) {
		for b.Loop() {
			time.Sleep(slow)
		}
	})
}
