package integration

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env/ssh/sshtest"
	"github.com/corralhq/corral/internal/testing/k8stest"
)

// The CLI benchmarks time whole processes, as a user or an agent's shell
// tool pays them: fork and exec of the corral binary, its start-up, the
// call to the daemon and the command's run. Each pairs corral with the
// native tool, measured in the same run on the same machine:
//
//	BenchmarkCLIRunSSH/corral      the second and later `corral run --backend ssh://h -- true`
//	BenchmarkCLIRunSSH/baseline    `ssh h true` through a warm OpenSSH ControlMaster
//	BenchmarkCLIRunSSH/newconn     `ssh h true` on a new connection each time (for reference)
//	BenchmarkCLIRunDocker/corral   `corral run --backend docker://c -- true`
//	BenchmarkCLIRunDocker/baseline `docker exec c true`
//	BenchmarkCLIOutputDocker/corral   `corral run --backend docker://c -- head -c 100M /dev/zero`
//	BenchmarkCLIOutputDocker/baseline `docker exec c head -c 100M /dev/zero`
//	BenchmarkCLIOutputDockerTmpfs     the same on a container whose /tmp is a tmpfs
//	BenchmarkCLIRunLocal/corral    `corral run -- true` through the daemon
//	BenchmarkCLIRunLocal/nodaemon  `corral run --no-daemon -- true`
//	BenchmarkCLIRunLocal/baseline  `sh -c true`
//	BenchmarkCLIRunPlugin          the second and later `corral run --backend localplugin:// -- true`
//	                               and `corral run -- true`, alternated through one daemon; reports
//	                               plugin-ms, native-ms and their ratio (target: ratio ≤ 2)
//	BenchmarkCLIOutputSSH/corral      `corral run --backend ssh://h -- head -c 100M /dev/zero`
//	BenchmarkCLIOutputSSH/baseline    `ssh h head -c 100M /dev/zero`
//	BenchmarkCLIVersion/corral     `corral version`
//	BenchmarkCLIVersion/baseline   a minimal Go program (one write to stdout): a Go command's start-up
//	BenchmarkCLIVersion/true       `true` (/bin/true): a process's floor cost
//	BenchmarkCLIRunConcurrent      200 `corral run -- true` at once; p99 against the single-call median
//
// Every corral figure is taken after one unmeasured call, so that the
// daemon runs and the backend is open: the figures are those of a warm
// daemon, which is what every call but a user's first pays.

// benchProcess runs name args until the benchmark ends, failing on the
// first error; want, when not empty, must be the start of its stdout.
func benchProcess(b *testing.B, environ []string, want string, name string, args ...string) {
	b.Helper()
	run := func() {
		cmd := exec.Command(name, args...)
		cmd.Env = environ
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			require.FailNow(b, fmt.Sprintf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr))
		}
		if !strings.HasPrefix(string(out), want) {
			require.FailNow(b, fmt.Sprintf("%s %s: stdout %q, want %q", name, strings.Join(args, " "), out, want))
		}
	}
	run() // warm: daemon up, backend open, page cache
	for b.Loop() {
		run()
	}
}

func BenchmarkCLIRunSSH(b *testing.B) {
	sshtest.Require(b)
	srv := sshtest.Start(b)
	h := newDaemonHome(b, buildCorral(b))
	h.trustSSH(srv)
	b.Run("corral", func(b *testing.B) {
		benchProcess(b, h.env, "", h.bin, "run", "--backend", srv.Target(), "--", "true")
	})
	b.Run("baseline", func(b *testing.B) {
		sock := srv.StartControlMaster(b)
		benchProcess(b, h.env, "", "ssh", "-F", srv.SSHConfig, "-S", sock, srv.Alias, "true")
	})
	b.Run("newconn", func(b *testing.B) {
		benchProcess(b, h.env, "", "ssh", "-F", srv.SSHConfig, "-o", "ControlMaster=no", "-o", "ControlPath=none", srv.Alias, "true")
	})
}

func BenchmarkCLIRunDocker(b *testing.B) {
	cli := requireDocker(b)
	name := startUserContainer(b, cli)
	h := newDaemonHome(b, buildCorral(b))
	b.Run("corral", func(b *testing.B) {
		benchProcess(b, h.env, "", h.bin, "run", "--backend", "docker://"+name, "--", "true")
	})
	b.Run("baseline", func(b *testing.B) {
		benchProcess(b, h.env, "", "docker", "exec", name, "true")
	})
}

func BenchmarkCLIOutputDocker(b *testing.B) {
	cli := requireDocker(b)
	benchOutputDocker(b, startUserContainer(b, cli))
}

// BenchmarkCLIOutputDockerTmpfs is BenchmarkCLIOutputDocker on a container
// whose /tmp is a tmpfs, as in the sandboxes corral makes itself
// (docker-image://): the log the command writes, which corral follows,
// is then in memory, not on the engine's storage driver (fuse-overlayfs
// on this machine, where writing 100 MB alone takes longer than docker
// exec streaming it).
func BenchmarkCLIOutputDockerTmpfs(b *testing.B) {
	cli := requireDocker(b)
	// Room for every op's log: a finished run keeps its log in the
	// sandbox until it is removed, whole where the sandbox's fallocate
	// cannot punch holes (busybox's).
	benchOutputDocker(b, startContainer(b, cli, map[string]string{"/tmp": "size=8g"}))
}

func benchOutputDocker(b *testing.B, name string) {
	h := newDaemonHome(b, buildCorral(b))
	const size = 100 << 20
	command := []string{"head", "-c", strconv.Itoa(size), "/dev/zero"}
	b.Run("corral", func(b *testing.B) {
		b.SetBytes(size)
		benchOutput(b, h.env, size, h.bin, append([]string{"run", "--backend", "docker://" + name, "--"}, command...)...)
	})
	b.Run("baseline", func(b *testing.B) {
		b.SetBytes(size)
		benchOutput(b, h.env, size, "docker", append([]string{"exec", name}, command...)...)
	})
}

// benchOutput is benchProcess for a command that prints size bytes: they
// are counted, not kept.
func benchOutput(b *testing.B, environ []string, size int64, name string, args ...string) {
	b.Helper()
	run := func() {
		cmd := exec.Command(name, args...)
		cmd.Env = environ
		var stderr strings.Builder
		cw := &countWriter{}
		cmd.Stdout, cmd.Stderr = cw, &stderr
		if err := cmd.Run(); err != nil || cw.n != size {
			require.FailNow(b, fmt.Sprintf("%s %s: %v, %d bytes of stdout (want %d)\n%s", name, strings.Join(args, " "), err, cw.n, size, stderr.String()))
		}
	}
	run()
	for b.Loop() {
		run()
	}
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

func BenchmarkCLIOutputSSH(b *testing.B) {
	sshtest.Require(b)
	srv := sshtest.Start(b)
	h := newDaemonHome(b, buildCorral(b))
	h.trustSSH(srv)
	const size = 100 << 20
	command := []string{"head", "-c", strconv.Itoa(size), "/dev/zero"}
	b.Run("corral", func(b *testing.B) {
		b.SetBytes(size)
		benchOutput(b, h.env, size, h.bin, append([]string{"run", "--backend", srv.Target(), "--"}, command...)...)
	})
	b.Run("baseline", func(b *testing.B) {
		b.SetBytes(size)
		benchOutput(b, h.env, size, "ssh", append([]string{"-F", srv.SSHConfig, srv.Alias}, command...)...)
	})
}

func BenchmarkCLIRunLocal(b *testing.B) {
	h := newDaemonHome(b, buildCorral(b))
	b.Run("corral", func(b *testing.B) {
		benchProcess(b, h.env, "", h.bin, "run", "--", "true")
	})
	b.Run("nodaemon", func(b *testing.B) {
		benchProcess(b, h.env, "", h.bin, "run", "--no-daemon", "--", "true")
	})
	b.Run("baseline", func(b *testing.B) {
		benchProcess(b, h.env, "", "sh", "-c", "true")
	})
}

func BenchmarkCLIVersion(b *testing.B) {
	h := newDaemonHome(b, buildCorral(b))
	hello := buildHello(b)
	b.Run("corral", func(b *testing.B) {
		benchProcess(b, h.env, "corral ", h.bin, "version")
	})
	b.Run("baseline", func(b *testing.B) {
		benchProcess(b, h.env, "hello", hello)
	})
	b.Run("true", func(b *testing.B) {
		benchProcess(b, h.env, "", "true")
	})
}

// buildHello builds a minimal Go program (it writes one line): the
// start-up any Go command pays, the baseline of corral version.
func buildHello(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	require.NoError(b, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hello\n\ngo 1.26\n"), 0o600))
	require.NoError(b, os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nimport \"os\"\n\nfunc main() { os.Stdout.WriteString(\"hello\\n\") }\n"), 0o600))
	bin := filepath.Join(dir, "hello")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(b, err, "go build hello: %s", out)
	return bin
}

// BenchmarkCLIRunConcurrent starts 200 `corral run -- true` clients at
// once through one warm daemon, per op, and reports their latencies:
// p50-ms and p99-ms over all ops, single-ms the median of single calls
// alone, measured in the same run just before, and p99/single (target
// ≤ 10). Any failed call fails the benchmark. sh-p99/single is the same
// ratio for 200 `sh -c true` at once: what the machine's cores allow any
// client.
func BenchmarkCLIRunConcurrent(b *testing.B) {
	h := newDaemonHome(b, buildCorral(b))
	const clients = 200
	timed := func(name string, args ...string) (time.Duration, error) {
		start := time.Now()
		cmd := exec.Command(name, args...)
		cmd.Env = h.env
		out, err := cmd.CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
		return time.Since(start), nil
	}
	run := func() (time.Duration, error) { return timed(h.bin, "run", "--", "true") }
	shell := func() (time.Duration, error) { return timed("sh", "-c", "true") }
	if _, err := run(); err != nil { // warm
		require.FailNow(b, err.Error())
	}
	var single []time.Duration
	for range 21 {
		d, err := run()
		require.NoError(b, err)
		single = append(single, d)
	}
	// 200 processes at once, every one timed: a batch.
	batch := func(call func() (time.Duration, error)) []time.Duration {
		var (
			mu   sync.Mutex
			wg   sync.WaitGroup
			ds   []time.Duration
			errs []error
		)
		for range clients {
			wg.Go(func() {
				d, err := call()
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				ds = append(ds, d)
			})
		}
		wg.Wait()
		require.Empty(b, errs, "%d of %d concurrent calls failed", len(errs), clients)
		return ds
	}
	var all []time.Duration
	for b.Loop() {
		all = append(all, batch(run)...)
	}
	b.StopTimer()
	// The floor of any client on this machine, measured the same way:
	// 200 `sh -c true` at once against one alone.
	var shSingle []time.Duration
	for range 21 {
		d, err := shell()
		require.NoError(b, err)
		shSingle = append(shSingle, d)
	}
	shAll := batch(shell)
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	p99 := quantile(all, 0.99)
	b.ReportMetric(ms(quantile(single, 0.5)), "single-ms")
	b.ReportMetric(ms(quantile(all, 0.5)), "p50-ms")
	b.ReportMetric(ms(p99), "p99-ms")
	b.ReportMetric(float64(p99)/float64(quantile(single, 0.5)), "p99/single")
	b.ReportMetric(float64(quantile(shAll, 0.99))/float64(quantile(shSingle, 0.5)), "sh-p99/single")
}

// quantile is the q-quantile of ds (nearest rank).
func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// BenchmarkCLIRunPlugin times `corral run --backend localplugin:// -- true`
// against `corral run -- true` (the local backend, native), alternated
// through one daemon so that both see the same machine at the same time.
// The daemon keeps the plugin process running between calls: after the
// first call, no plugin starts.
func BenchmarkCLIRunPlugin(b *testing.B) {
	h := newDaemonHome(b, buildCorral(b))
	h.env = append(h.env, "CORRAL_PLUGIN_PATH="+buildPlugins(b, "localplugin"))
	run := func(args ...string) time.Duration {
		start := time.Now()
		cmd := exec.Command(h.bin, args...)
		cmd.Env = h.env
		if out, err := cmd.CombinedOutput(); err != nil {
			require.FailNow(b, fmt.Sprintf("corral %s: %v\n%s", strings.Join(args, " "), err, out))
		}
		return time.Since(start)
	}
	plugin := []string{"run", "--backend", "localplugin://", "--", "true"}
	native := []string{"run", "--", "true"}
	run(plugin...) // warm: daemon up, plugin started, backends open
	run(native...)
	var tp, tn time.Duration
	n := 0
	for b.Loop() {
		tp += run(plugin...)
		tn += run(native...)
		n++
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(n) / 1e6 }
	b.ReportMetric(ms(tp), "plugin-ms")
	b.ReportMetric(ms(tn), "native-ms")
	b.ReportMetric(float64(tp)/float64(tn), "ratio")
}

// BenchmarkCLIRunK8s: `corral run --backend k8s://NS/POD -- true` through
// the daemon against `kubectl exec POD -- true`, on the test cluster.
func BenchmarkCLIRunK8s(b *testing.B) {
	c := k8stest.Cluster(b)
	ns := c.Namespace(b)
	c.Pod(b, ns, "p")
	h := newDaemonHome(b, buildCorral(b))
	buildK8sPluginTB(b)
	h.env = append(h.env, "KUBECONFIG="+c.Kubeconfig())
	b.Run("corral", func(b *testing.B) {
		benchProcess(b, h.env, "", h.bin, "run", "--backend", "k8s://"+ns+"/p", "--", "true")
	})
	b.Run("baseline", func(b *testing.B) {
		kubectl := c.Kubectl()
		if kubectl == "" {
			b.Skip("no kubectl: the cluster's build puts one in its cache")
		}
		benchProcess(b, h.env, "", kubectl, "-n", ns, "exec", "p", "--", "true")
	})
}
