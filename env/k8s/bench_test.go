package k8s

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
	"github.com/corralhq/corral/internal/testing/k8stest"
)

func benchEnv(b *testing.B, c *k8stest.TestCluster, target string) env.Environment {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tr, eo, err := Open(ctx, target, Options{Kubeconfig: c.Kubeconfig(), Logger: quietLogger()})
	require.NoError(b, err)
	e, err := nohup.New(tr, eo)
	require.NoError(b, err)
	b.Cleanup(func() { e.Close() })
	return e
}

// runTrue starts `true`, drains its output and waits: what corral run does.
func runTrue(b *testing.B, ctx context.Context, e env.Environment) {
	p, err := e.Start(ctx, env.Spec{Command: "true"})
	require.NoError(b, err)
	r, err := p.Output(ctx, 0)
	require.NoError(b, err)
	_, _ = io.Copy(io.Discard, r)
	r.Close()
	st, err := p.Wait(ctx)
	require.NoError(b, err)
	require.True(b, st.Success(), "%v", st)
	_ = p.Release()
}

// BenchmarkK8sExecTrue compares a foreground `true` through the
// Environment (resident shells on) with one client-go exec of `true` in
// this process, which is the least any exec-based backend can pay.
func BenchmarkK8sExecTrue(b *testing.B) {
	c := k8stest.Cluster(b)
	ns := c.Namespace(b)
	c.Pod(b, ns, "p")
	b.Run("corral", func(b *testing.B) {
		e := benchEnv(b, c, "k8s://"+ns+"/p")
		ctx := context.Background()
		runTrue(b, ctx, e) // the resident shells open
		for b.Loop() {
			runTrue(b, ctx, e)
		}
	})
	b.Run("baseline", func(b *testing.B) {
		ctx := context.Background()
		for b.Loop() {
			_, errOut, err := c.Exec(ctx, ns, "p", "", nil, "true")
			require.NoError(b, err, errOut)
		}
	})
}

// BenchmarkK8sExitDetection measures how long after a process exits Wait
// returns (exit-detect-ms, the median). The process writes the clock's
// time just before it exits (busybox adjtimex, in microseconds: its date
// has no %N); the pod runs on this machine's kernel, so the clocks are
// one.
func BenchmarkK8sExitDetection(b *testing.B) {
	c := k8stest.Cluster(b)
	ns := c.Namespace(b)
	c.Pod(b, ns, "p")
	e := benchEnv(b, c, "k8s://"+ns+"/p")
	ctx := context.Background()
	runTrue(b, ctx, e)
	var lat []time.Duration
	for b.Loop() {
		p, err := e.Start(ctx, env.Spec{Command: "sleep 0.2; adjtimex | sed -n 's/.*time.tv_sec: *//p; s/.*time.tv_usec: *//p' | tr '\\n' ' '"})
		require.NoError(b, err)
		_, err = p.Wait(ctx)
		require.NoError(b, err)
		waited := time.Now()
		r, err := p.Output(ctx, 0)
		require.NoError(b, err)
		out, _ := io.ReadAll(r)
		r.Close()
		f := strings.Fields(string(out))
		require.Len(b, f, 2, "adjtimex printed %q", out)
		sec, err1 := strconv.ParseInt(f[0], 10, 64)
		usec, err2 := strconv.ParseInt(f[1], 10, 64)
		require.True(b, err1 == nil && err2 == nil, "adjtimex printed %q", out)
		lat = append(lat, waited.Sub(time.Unix(sec, usec*1000)))
		_ = p.Release()
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/float64(time.Millisecond), "exit-detect-ms")
}

// BenchmarkK8sLogRead reads the 100 MB log of a finished process through
// Output, against client-go exec of cat on the same bytes in a file.
func BenchmarkK8sLogRead(b *testing.B) {
	const size = 100 << 20
	c := k8stest.Cluster(b)
	ns := c.Namespace(b)
	c.Pod(b, ns, "p")
	e := benchEnv(b, c, "k8s://"+ns+"/p")
	ctx := context.Background()
	b.Run("corral", func(b *testing.B) {
		p, err := e.Start(ctx, env.Spec{Command: fmt.Sprintf("head -c %d /dev/zero", size)})
		require.NoError(b, err)
		_, err = p.Wait(ctx)
		require.NoError(b, err)
		b.SetBytes(size)
		for b.Loop() {
			r, err := p.Output(ctx, 0)
			require.NoError(b, err)
			n, _ := io.Copy(io.Discard, r)
			r.Close()
			require.EqualValues(b, size, n)
		}
	})
	b.Run("baseline", func(b *testing.B) {
		_, errOut, err := c.Exec(ctx, ns, "p", "", nil, "sh", "-c", fmt.Sprintf("head -c %d /dev/zero >/tmp/bench.log", size))
		require.NoError(b, err, errOut)
		b.SetBytes(size)
		for b.Loop() {
			w := &counter{}
			err := c.ExecTo(ctx, ns, "p", "", w, "cat", "/tmp/bench.log")
			require.NoError(b, err)
			require.EqualValues(b, size, w.n)
		}
	})
}

type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }
