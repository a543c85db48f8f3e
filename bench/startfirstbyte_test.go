package bench

import (
	"context"
	"io"
	"log/slog"
	"os/exec"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
	"github.com/corralhq/corral/registry"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// firstByteWriter records when the first output byte arrives.
type firstByteWriter struct {
	once sync.Once
	at   time.Time
	got  chan struct{}
}

func newFirstByteWriter() *firstByteWriter {
	return &firstByteWriter{got: make(chan struct{})}
}

func (w *firstByteWriter) Write(p []byte) (int, error) {
	if len(p) > 0 {
		w.once.Do(func() {
			w.at = time.Now()
			close(w.got)
		})
	}
	return len(p), nil
}

// BenchmarkStartFirstByte measures the time from asking for `echo hi` to
// receiving its first output byte: through corral's registry on the local
// backend, and through os/exec with a pipe. ns/op is that latency alone;
// waiting for the exit and cleanup are outside the measurement.
func BenchmarkStartFirstByte(b *testing.B) {
	b.Run("corral", func(b *testing.B) {
		reg, err := registry.New(registry.Config{
			Open: func(ctx context.Context, target string) (env.Environment, error) {
				return local.New(local.Options{})
			},
			// The event rate limiter warns at this pace; its lines would
			// split go test's result line.
			Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			b.Fatal(err)
		}
		defer reg.Close()
		ctx := context.Background()
		var total time.Duration
		b.ResetTimer()
		for range b.N {
			w := newFirstByteWriter()
			start := time.Now()
			res, err := reg.Run(ctx, registry.RunOptions{
				StartOptions: registry.StartOptions{Command: "echo hi"},
				Output:       w,
			})
			if err != nil {
				b.Fatal(err)
			}
			select {
			case <-w.got:
			default:
				b.Fatalf("Run returned without streaming output; result %+v", res.Info)
			}
			total += w.at.Sub(start)
		}
		b.StopTimer()
		b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/op")
	})

	b.Run("baseline", func(b *testing.B) {
		var total time.Duration
		one := make([]byte, 1)
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			cmd := exec.Command("/bin/sh", "-c", "echo hi")
			out, err := cmd.StdoutPipe()
			if err != nil {
				b.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(out, one); err != nil {
				b.Fatal(err)
			}
			total += time.Since(start)
			_, _ = io.Copy(io.Discard, out)
			if err := cmd.Wait(); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/op")
	})
}
