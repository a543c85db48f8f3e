package local

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"golang.org/x/sys/unix"
)

func benchEnv(b *testing.B, disableCgroup bool) *Env {
	b.Helper()
	if !disableCgroup {
		if _, _, err := findCgroup(); err != nil {
			b.Skipf("cgroup v2 not usable: %v", err)
		}
	}
	e, err := New(Options{StateDir: b.TempDir(), DisableCgroup: disableCgroup})
	require.NoError(b, err)
	b.Cleanup(func() { _ = e.Close() })
	return e
}

// BenchmarkStartWait measures one whole process life: start, read all
// output, wait.
func BenchmarkStartWait(b *testing.B) {
	for _, mech := range []struct {
		name    string
		disable bool
	}{{"cgroup", false}, {"scan", true}} {
		for _, kind := range []struct {
			name string
			spec env.Spec
		}{
			{"pipes", env.Spec{Command: "echo hi"}},
			{"pty", env.Spec{Command: "echo hi", PTY: &env.DefaultWindowSize}},
			{"detached", env.Spec{Command: "echo hi", Detach: true}},
		} {
			b.Run(mech.name+"/"+kind.name, func(b *testing.B) {
				e := benchEnv(b, mech.disable)
				ctx := context.Background()
				for b.Loop() {
					runWhole(ctx, b, e, kind.spec)
				}
			})
		}
	}
}

// BenchmarkOutputThroughput reads 64 MiB of output through the live
// stream (pipes) and through the log file (detached).
func BenchmarkOutputThroughput(b *testing.B) {
	const size = 64 << 20
	for _, detach := range []bool{false, true} {
		name := "pipes"
		if detach {
			name = "detached"
		}
		b.Run(name, func(b *testing.B) {
			e := benchEnv(b, false)
			ctx := context.Background()
			b.SetBytes(size)
			for b.Loop() {
				p, err := e.Start(ctx, env.Spec{Command: "head -c 67108864 /dev/zero", Detach: detach})
				require.NoError(b, err)
				r, err := p.Output(ctx, 0)
				require.NoError(b, err)
				n, err := io.Copy(io.Discard, r)
				if err != nil || n != size {
					require.FailNow(b, fmt.Sprintf("read %d bytes, %v", n, err))
				}
				_ = r.Close()
				if _, err := p.Wait(ctx); err != nil {
					require.FailNow(b, fmt.Sprint(err))
				}
				if detach {
					_ = p.Remove(ctx)
				}
				_ = p.Release()
			}
		})
	}
}

// detachedVsPipes are the two sides of the Detached benchmarks: a detached
// process (corral) against one started with pipes (baseline).
var detachedVsPipes = []struct {
	name   string
	detach bool
}{{"corral", true}, {"baseline", false}}

// BenchmarkDetachedStartWait is the cost of one detached process's whole
// life (start, read all output, wait, remove) against the same for a
// process started with pipes, in the same Env (cgroups where usable).
// make bench checks detached/pipes.
func BenchmarkDetachedStartWait(b *testing.B) {
	for _, c := range detachedVsPipes {
		b.Run(c.name, func(b *testing.B) {
			e := benchEnv(b, !cgroupUsable())
			ctx := context.Background()
			spec := env.Spec{Command: "true", Detach: c.detach}
			for b.Loop() {
				runWhole(ctx, b, e, spec)
			}
		})
	}
}

// runWhole is one whole process life: start, read all output, wait, and
// remove a detached process's directory.
func runWhole(ctx context.Context, b *testing.B, e *Env, spec env.Spec) {
	p, err := e.Start(ctx, spec)
	require.NoError(b, err)
	r, err := p.Output(ctx, 0)
	require.NoError(b, err)
	if _, err := io.Copy(io.Discard, r); err != nil {
		require.FailNow(b, fmt.Sprint(err))
	}
	_ = r.Close()
	if _, err := p.Wait(ctx); err != nil {
		require.FailNow(b, fmt.Sprint(err))
	}
	if spec.Detach {
		require.NoError(b, p.Remove(ctx))
	}
	_ = p.Release()
}

func cgroupUsable() bool {
	_, _, err := findCgroup()
	return err == nil
}

// BenchmarkDetachedExitDetection measures how long after a command ended
// Wait returns, as the median in ms (exit-detect-ms): detached (corral)
// and with pipes (baseline). The command tells the benchmark when it ends
// by writing to a FIFO as its last action; it idles first, as real
// commands do, so Wait is in its steady state when the exit comes.
func BenchmarkDetachedExitDetection(b *testing.B) {
	for _, c := range detachedVsPipes {
		b.Run(c.name, func(b *testing.B) {
			e := benchEnv(b, !cgroupUsable())
			fifo := filepath.Join(b.TempDir(), "ended")
			require.NoError(b, unix.Mkfifo(fifo, 0o600))
			ctx := context.Background()
			var lat []time.Duration
			for b.Loop() {
				ended := make(chan time.Time, 1)
				go func() {
					f, err := os.Open(fifo)
					if err != nil {
						ended <- time.Time{}
						return
					}
					defer f.Close()
					_, _ = io.ReadAll(f)
					ended <- time.Now()
				}()
				p, err := e.Start(ctx, env.Spec{Command: "sleep 0.02; echo x >'" + fifo + "'", Detach: c.detach})
				require.NoError(b, err)
				if _, err := p.Wait(ctx); err != nil {
					require.FailNow(b, fmt.Sprint(err))
				}
				done := time.Now()
				at := <-ended
				if at.IsZero() {
					require.FailNow(b, "fifo")
				}
				lat = append(lat, done.Sub(at))
				if c.detach {
					_ = p.Remove(ctx)
				}
				_ = p.Release()
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2])/float64(time.Millisecond), "exit-detect-ms")
		})
	}
}
