//go:build linux

package registry

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
)

// detachedIngestBytes is what the ingest benchmark's pipeline writes.
const detachedIngestBytes = 200 << 20

var detachedIngestPipeline = "head -c 209715200 /dev/zero | tr '\\0' a"

// BenchmarkDetachedIngest runs a flood of output through an in-process
// registry whose local Environment detaches the process (what corral start
// and the daemon do): Start, then Wait until every byte is in the
// registry's buffer. The baseline is the raw pipeline into /dev/null,
// measured in the same run. make bench checks corral/baseline in MB/s.
func BenchmarkDetachedIngest(b *testing.B) {
	b.Run("corral", func(b *testing.B) {
		r := localBenchRegistry(b, 16, true)
		ctx := context.Background()
		b.SetBytes(detachedIngestBytes)
		for b.Loop() {
			in, err := r.Start(ctx, StartOptions{Command: detachedIngestPipeline})
			if err != nil {
				b.Fatal(err)
			}
			if !in.Detached {
				b.Fatal("the process was not detached")
			}
			in, err = r.Wait(ctx, in.ID, 0)
			if err != nil || in.OutputBytes != detachedIngestBytes {
				b.Fatalf("Wait: %d bytes, %v", in.OutputBytes, err)
			}
			if err := r.Remove(ctx, in.ID); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The same pipeline run in the foreground (the registry reads the
	// command's pipe): the ceiling a detached process is compared with.
	b.Run("foreground", func(b *testing.B) {
		r := localBenchRegistry(b, 16, true)
		ctx := context.Background()
		b.SetBytes(detachedIngestBytes)
		for b.Loop() {
			res, err := r.Run(ctx, RunOptions{StartOptions: StartOptions{Command: detachedIngestPipeline}})
			if err != nil || res.OutputBytes != detachedIngestBytes {
				b.Fatalf("Run: %d bytes, %v", res.OutputBytes, err)
			}
			if err := r.Remove(ctx, res.ID); err != nil {
				b.Fatal(err)
			}
		}
	})
	// What a detached path cannot avoid: the pipeline writing its log
	// file (what survives the supervisor), and any second reader of its
	// output at all. Both are measured without corral, for the closing
	// figures against the baseline.
	b.Run("floor-file", func(b *testing.B) {
		log := filepath.Join(b.TempDir(), "log")
		b.SetBytes(detachedIngestBytes)
		for b.Loop() {
			if err := exec.Command("/bin/sh", "-c", detachedIngestPipeline+" >"+log).Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor-reader", func(b *testing.B) {
		b.SetBytes(detachedIngestBytes)
		for b.Loop() {
			if err := exec.Command("/bin/sh", "-c", detachedIngestPipeline+" | cat >/dev/null").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline", func(b *testing.B) {
		b.SetBytes(detachedIngestBytes)
		for b.Loop() {
			if err := exec.Command("/bin/sh", "-c", detachedIngestPipeline+" >/dev/null").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
