package docker

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
)

// BenchmarkExecTrue compares a foreground `true` through the Environment
// (start, output drained, wait: what `corral run` does) with `docker exec
// C true` by the docker CLI. Remove, which the foreground path leaves to
// the registry's pruning, is timed apart (remove-ms).
func BenchmarkExecTrue(b *testing.B) {
	cli := requireEngine(b)
	name := startPlainContainer(b, cli)

	b.Run("corral", func(b *testing.B) {
		e := openForBench(b, SchemeContainer+name)
		ctx := context.Background()
		var removed []time.Duration
		b.ResetTimer()
		for b.Loop() {
			p := runTrue(b, ctx, e)
			b.StopTimer()
			t0 := time.Now()
			require.NoError(b, p.Remove(ctx))
			removed = append(removed, time.Since(t0))
			b.StartTimer()
		}
		b.StopTimer()
		slices.Sort(removed)
		b.ReportMetric(float64(removed[len(removed)/2])/float64(time.Millisecond), "remove-ms")
	})
	b.Run("baseline", func(b *testing.B) {
		if _, err := exec.LookPath("docker"); err != nil {
			b.Skip("no docker CLI")
		}
		for b.Loop() {
			if out, err := exec.Command("docker", "exec", name, "true").CombinedOutput(); err != nil {
				require.FailNow(b, fmt.Sprintf("docker exec: %v\n%s", err, out))
			}
		}
	})
}

// BenchmarkExitDetection measures how long after a process exits Wait
// returns, reported as the median in ms (exit-detect-ms). The process tells
// the host the instant before it exits by writing to a FIFO bind-mounted
// from the host, so the figure is free of start-up costs and clock skew.
func BenchmarkExitDetection(b *testing.B) {
	cli := requireEngine(b)
	dir := b.TempDir()
	fifo := filepath.Join(dir, "exit")
	require.NoError(b, syscall.Mkfifo(fifo, 0o666))
	name := startContainerWithMount(b, cli, dir, "/bench")
	e := openForBench(b, SchemeContainer+name)
	ctx := context.Background()

	var lat []time.Duration
	for b.Loop() {
		exited := make(chan time.Time, 1)
		go func() {
			f, err := os.Open(fifo)
			if err != nil {
				exited <- time.Time{}
				return
			}
			defer f.Close()
			_, _ = bufio.NewReader(f).ReadString('\n')
			exited <- time.Now()
		}()
		// The process idles a little first, as real commands do, so the
		// engine's polling is in its steady state when the exit comes.
		p, err := e.Start(ctx, env.Spec{Command: "sleep 0.3; echo x >/bench/exit"})
		require.NoError(b, err)
		if _, err := p.Wait(ctx); err != nil {
			require.FailNow(b, fmt.Sprint(err))
		}
		done := time.Now()
		at := <-exited
		if at.IsZero() {
			require.FailNow(b, "fifo")
		}
		lat = append(lat, done.Sub(at))
		_ = p.Remove(ctx)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/float64(time.Millisecond), "exit-detect-ms")
}

// BenchmarkLogRead reads the 100 MB output of a finished process through
// the Environment (corral), against `docker exec C cat` of the same log
// file (baseline), and reports the bytes the transport moved per byte of
// log (bytes-moved/log-size): 1 means every byte crossed the engine once.
// Producing the output is not timed.
func BenchmarkLogRead(b *testing.B) {
	cli := requireEngine(b)
	name := startPlainContainer(b, cli)
	const logSize = 100 << 20
	tr := &countingTransport{Transport: NewTransport(cli, name, "")}
	e, err := newEnv(tr, name, "", Options{Residents: benchResidents()}, discardLogger(), nil, nil)
	require.NoError(b, err)
	b.Cleanup(func() { e.Close() })
	ctx := context.Background()
	p, err := e.Start(ctx, env.Spec{Command: fmt.Sprintf(
		`i=0; while [ $i -lt %d ]; do head -c 1048576 /dev/zero | tr '\0' x; i=$((i+1)); done`, logSize>>20), Detach: true})
	require.NoError(b, err)
	if _, err := p.Wait(ctx); err != nil {
		require.FailNow(b, fmt.Sprint(err))
	}
	b.Cleanup(func() { _ = p.Remove(context.Background()) })

	b.Run("corral", func(b *testing.B) {
		b.SetBytes(logSize)
		var moved int64
		for b.Loop() {
			before := tr.stdout.Load()
			r, err := p.Output(ctx, 0)
			require.NoError(b, err)
			n, err := io.Copy(io.Discard, r)
			r.Close()
			if err != nil || n != logSize {
				require.FailNow(b, fmt.Sprintf("read %d bytes, %v; want %d", n, err, logSize))
			}
			moved += tr.stdout.Load() - before
		}
		b.ReportMetric(float64(moved)/float64(int64(b.N)*logSize), "bytes-moved/log-size")
	})
	b.Run("baseline", func(b *testing.B) {
		if _, err := exec.LookPath("docker"); err != nil {
			b.Skip("no docker CLI")
		}
		ref, err := p.Ref()
		require.NoError(b, err)
		var state struct {
			Dir string `json:"dir"`
		}
		if err := json.Unmarshal(ref.Data, &state); err != nil || state.Dir == "" {
			require.FailNow(b, fmt.Sprintf("ref %s: no state dir (%v)", ref.Data, err))
		}
		b.SetBytes(logSize)
		for b.Loop() {
			cmd := exec.Command("docker", "exec", name, "cat", state.Dir+"/log")
			cmd.Stdout = io.Discard
			require.NoError(b, cmd.Run(), "docker exec cat")
		}
	})
}

// countingTransport counts the script output bytes the engine sends.
type countingTransport struct {
	*Transport
	stdout atomic.Int64
}

func (c *countingTransport) Exec(ctx context.Context, script string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	return c.Transport.Exec(ctx, script, stdin, &countingWriter{w: stdout, n: &c.stdout}, stderr)
}

// OpenShell counts what resident shells send too.
func (c *countingTransport) OpenShell(ctx context.Context, script string) (*nohup.Shell, error) {
	sh, err := c.Transport.OpenShell(ctx, script)
	if err != nil {
		return nil, err
	}
	sh.Stdout = io.TeeReader(sh.Stdout, &countingWriter{n: &c.stdout})
	return sh, nil
}

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	if c.w == nil {
		return len(p), nil
	}
	return c.w.Write(p)
}

func openForBench(b *testing.B, target string) env.Environment {
	b.Helper()
	e, err := Open(context.Background(), target, Options{Residents: benchResidents()})
	require.NoError(b, err)
	b.Cleanup(func() { e.Close() })
	return e
}

// startContainerWithMount is startPlainContainer with hostDir bound at
// target.
func startContainerWithMount(b *testing.B, cli *client.Client, hostDir, target string) string {
	b.Helper()
	ctx := context.Background()
	name := "corral-bench-" + randomSuffix()
	init := true
	_, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: name,
		Config: &container.Config{
			Image:  testImage,
			Cmd:    []string{"/bin/sh", "-c", keepAlive},
			Labels: map[string]string{"dev.corral.test": "true"},
		},
		HostConfig: &container.HostConfig{
			Init:   &init,
			Mounts: []mount.Mount{{Type: mount.TypeBind, Source: hostDir, Target: target}},
		},
	})
	require.NoError(b, err)
	b.Cleanup(func() {
		_, _ = cli.ContainerRemove(context.Background(), name, client.ContainerRemoveOptions{Force: true})
	})
	if _, err := cli.ContainerStart(ctx, name, client.ContainerStartOptions{}); err != nil {
		require.FailNow(b, fmt.Sprint(err))
	}
	return name
}

// benchResidents is Options.Residents for the benchmarks:
// CORRAL_BENCH_RESIDENTS=-1 measures without resident shells.
func benchResidents() int {
	n, _ := strconv.Atoi(os.Getenv("CORRAL_BENCH_RESIDENTS"))
	return n
}

// runTrue runs `true` in the foreground as `corral run` asks it of the
// backend: Start, the output read to its end, Wait.
func runTrue(b *testing.B, ctx context.Context, e env.Environment) env.Process {
	p, err := e.Start(ctx, env.Spec{Command: "true"})
	require.NoError(b, err)
	r, err := p.Output(ctx, 0)
	require.NoError(b, err)
	if _, err := io.Copy(io.Discard, r); err != nil {
		require.FailNow(b, fmt.Sprint(err))
	}
	r.Close()
	if st, err := p.Wait(ctx); err != nil || !st.Success() {
		require.FailNow(b, fmt.Sprintf("Wait: %v, %v", st, err))
	}
	return p
}
