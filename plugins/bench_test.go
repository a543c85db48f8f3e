package plugins_test

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
)

// benchEnvs returns the pair every benchmark compares: the local backend
// through the plugin boundary (corral) and in-process (baseline).
func benchEnvs(b *testing.B) map[string]env.Environment {
	b.Helper()
	state := b.TempDir()
	viaPlugin := openPlugin(b, "localplugin://?state="+state)
	b.Cleanup(func() { viaPlugin.Close() })
	inProcess, err := local.New(local.Options{StateDir: state})
	require.NoError(b, err)
	b.Cleanup(func() { inProcess.Close() })
	return map[string]env.Environment{"corral": viaPlugin, "baseline": inProcess}
}

// BenchmarkPluginStartWait: start and wait for `true`.
func BenchmarkPluginStartWait(b *testing.B) {
	envs := benchEnvs(b)
	for _, name := range []string{"corral", "baseline"} {
		e := envs[name]
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			for b.Loop() {
				p, err := e.Start(ctx, env.Spec{Command: "true"})
				require.NoError(b, err)
				if st, err := p.Wait(ctx); err != nil || !st.Success() {
					require.FailNow(b, fmt.Sprintf("wait: %v, %v", st, err))
				}
				p.Release()
			}
		})
	}
}

// BenchmarkPluginOutput streams 256 MiB of output to the reader.
func BenchmarkPluginOutput(b *testing.B) {
	const size = 256 << 20
	envs := benchEnvs(b)
	for _, name := range []string{"corral", "baseline"} {
		e := envs[name]
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			b.SetBytes(size)
			buf := make([]byte, 1<<20)
			for b.Loop() {
				p, err := e.Start(ctx, env.Spec{Command: "head -c 268435456 /dev/zero"})
				require.NoError(b, err)
				r, err := p.Output(ctx, 0)
				require.NoError(b, err)
				n, err := io.CopyBuffer(io.Discard, r, buf)
				r.Close()
				if err != nil || n != size {
					require.FailNow(b, fmt.Sprintf("read %d bytes, %v; want %d", n, err, size))
				}
				if _, err := p.Wait(ctx); err != nil {
					require.FailNow(b, fmt.Sprint(err))
				}
				p.Release()
			}
		})
	}
}
