package local

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

// BenchmarkDetachedLogBound is the cost of the log's bound on disk: a
// detached process writes 128 MiB, read whole through its stream, with the
// default bound (corral: the stream punches the middle out as it reads,
// 96 times) against no bound (baseline). make bench checks corral/baseline.
func BenchmarkDetachedLogBound(b *testing.B) {
	const size = 128 << 20
	for _, c := range []struct {
		name   string
		logMax int64
	}{{"corral", 0}, {"baseline", -1}} {
		b.Run(c.name, func(b *testing.B) {
			e, err := New(Options{StateDir: b.TempDir(), DisableCgroup: !cgroupUsable(), LogMax: c.logMax})
			require.NoError(b, err)
			b.Cleanup(func() { _ = e.Close() })
			ctx := context.Background()
			b.SetBytes(size)
			for b.Loop() {
				runWhole(ctx, b, e, env.Spec{Command: "head -c 134217728 /dev/zero", Detach: true})
			}
		})
	}
}
