package local

import (
	"context"
	"io"
	"testing"

	"github.com/corralhq/corral/env"
)

func benchEnv(b *testing.B, disableCgroup bool) *Env {
	b.Helper()
	if !disableCgroup {
		if _, _, err := findCgroup(); err != nil {
			b.Skipf("cgroup v2 not usable: %v", err)
		}
	}
	e, err := New(Options{StateDir: b.TempDir(), DisableCgroup: disableCgroup})
	if err != nil {
		b.Fatal(err)
	}
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
					p, err := e.Start(ctx, kind.spec)
					if err != nil {
						b.Fatal(err)
					}
					r, err := p.Output(ctx, 0)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := io.Copy(io.Discard, r); err != nil {
						b.Fatal(err)
					}
					_ = r.Close()
					if _, err := p.Wait(ctx); err != nil {
						b.Fatal(err)
					}
					if kind.spec.Detach {
						_ = p.Remove(ctx)
					}
					_ = p.Release()
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
				if err != nil {
					b.Fatal(err)
				}
				r, err := p.Output(ctx, 0)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, r)
				if err != nil || n != size {
					b.Fatalf("read %d bytes, %v", n, err)
				}
				_ = r.Close()
				if _, err := p.Wait(ctx); err != nil {
					b.Fatal(err)
				}
				if detach {
					_ = p.Remove(ctx)
				}
				_ = p.Release()
			}
		})
	}
}
