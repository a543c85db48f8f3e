package integration

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
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
	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/docker"
	"github.com/corralhq/corral/env/local"
	"github.com/corralhq/corral/registry"
)

// buildListener builds testdata/listener as a static binary (it also runs
// in the busybox image, which has no libc) into dir.
func buildListener(b *testing.B, dir string) string {
	b.Helper()
	bin := filepath.Join(dir, "listener")
	cmd := exec.Command("go", "build", "-o", bin, "./testdata/listener")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		require.FailNow(b, fmt.Sprintf("go build testdata/listener: %v\n%s", err, out))
	}
	return bin
}

// benchRegistry is an in-process registry whose "local" backend keeps its
// state in a directory of the benchmark's and whose docker:// targets are
// opened with the default engine.
func benchRegistry(b *testing.B) *registry.Registry {
	b.Helper()
	state := b.TempDir()
	reg, err := registry.New(registry.Config{
		Open: func(ctx context.Context, target string) (env.Environment, error) {
			if target == "local" {
				return local.New(local.Options{StateDir: state, Logger: slog.New(slog.DiscardHandler)})
			}
			return docker.Open(ctx, target, docker.Options{})
		},
		DefaultBackend: "local",
		Logger:         slog.New(slog.DiscardHandler),
	})
	require.NoError(b, err)
	b.Cleanup(func() { reg.Close() })
	return reg
}

// hostFreePort returns a TCP port of this machine nothing listens on.
func hostFreePort(b *testing.B) int {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// BenchmarkReadyLatency measures how long after a server's socket starts
// listening corral says it is ready: testdata/listener prints the wall
// clock right after net.Listen returned, and the latency is Info.ReadyAt
// minus that (the container shares the host's clock). Each op starts one
// listener with a readiness port through an in-process registry, waits
// for readiness and kills it; the figures are the median and 90th
// percentile over the ops (ready-ms-median, ready-ms-p90). Target: a
// median below 50 ms on both backends.
//
//	/local   env/local: the registry polls the tree's sockets
//	/docker  a plain container (docker://): env/nohup's in-sandbox wait
func BenchmarkReadyLatency(b *testing.B) {
	dir := b.TempDir()
	bin := buildListener(b, dir)
	reg := benchRegistry(b)

	// A server that listens 50-150 ms after its start, and one that takes
	// a second (as dev servers do): on docker the first meets the start's
	// own execs (its output and exit follows) still being set up, which
	// the second does not.
	startups := []struct{ name, flag string }{{"startup=50ms", "-startup 50ms"}, {"startup=1s", "-startup 1s"}}
	b.Run("local", func(b *testing.B) {
		for _, su := range startups {
			b.Run(su.name, func(b *testing.B) {
				benchReadyLatency(b, reg, "local", bin+" "+su.flag, func() int { return hostFreePort(b) })
			})
		}
	})
	b.Run("docker", func(b *testing.B) {
		cli := requireDocker(b)
		name := startUserContainer(b, cli)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "docker", "cp", bin, name+":/tmp/listener").CombinedOutput(); err != nil {
			require.FailNow(b, fmt.Sprintf("docker cp: %v\n%s", err, out))
		}
		// The container's own network namespace: any port is free in it.
		for _, su := range startups {
			b.Run(su.name, func(b *testing.B) {
				benchReadyLatency(b, reg, docker.SchemeContainer+name, "/tmp/listener "+su.flag, func() int { return 20000 + rand.IntN(20000) })
			})
		}
	})
}

func benchReadyLatency(b *testing.B, reg *registry.Registry, backend, bin string, port func() int) {
	ctx := context.Background()
	var lat []time.Duration
	for b.Loop() {
		p := port()
		in, err := reg.Start(ctx, registry.StartOptions{Backend: backend, Command: fmt.Sprintf("exec %s %d", bin, p), Dir: "/",
			Ready: &registry.ReadyOptions{Port: p}})
		require.NoError(b, err)
		ready, err := reg.WaitReady(ctx, in.ID, time.Minute)
		if err != nil || ready.ReadyAt.IsZero() {
			require.FailNow(b, fmt.Sprintf("WaitReady: %v (state %s)", err, ready.State))
		}
		listened := listenedAt(b, reg, in.ID)
		lat = append(lat, ready.ReadyAt.Sub(listened))
		if _, err := reg.Kill(ctx, in.ID, registry.KillOptions{Grace: time.Second}); err != nil {
			require.FailNow(b, fmt.Sprint(err))
		}
	}
	reportQuantiles(b, lat)
}

// listenedAt waits for the listener's "listening NANOS" line and returns
// the time it holds.
func listenedAt(b *testing.B, reg *registry.Registry, id string) time.Time {
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := reg.Log(context.Background(), id, registry.LogOptions{Limit: 10})
		require.NoError(b, err)
		for _, line := range res.Lines {
			if ns, ok := strings.CutPrefix(line, "listening "); ok {
				n, err := strconv.ParseInt(ns, 10, 64)
				if err != nil {
					require.FailNow(b, fmt.Sprintf("listener printed %q", line))
				}
				return time.Unix(0, n)
			}
		}
		if time.Now().After(deadline) {
			require.FailNow(b, fmt.Sprintf("no 'listening' line from %s: %q", id, res.Lines))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func reportQuantiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		return float64(lat[int(p*float64(len(lat)-1)+0.5)]) / float64(time.Millisecond)
	}
	b.ReportMetric(q(0.5), "ready-ms-median")
	b.ReportMetric(q(0.9), "ready-ms-p90")
	b.Logf("%d starts: ready after %s (min) to %s (max) (load: %s)", len(lat), lat[0], lat[len(lat)-1], loadAvg())
}

// idleWindow is how long BenchmarkIdleReadyWatch measures each phase.
const idleWindow = 10 * time.Second

// idleWatchProcs is how many processes BenchmarkIdleReadyWatch runs.
const idleWatchProcs = 100

var idleBaseline struct {
	once sync.Once
	busy time.Duration // machine CPU time used over idleWindow with nothing of ours running
	err  error
}

// BenchmarkIdleReadyWatch measures what watching for readiness costs when
// nothing happens, with 100 processes started with a readiness port on
// the local backend through an in-process registry:
//
//	/watching  the processes never listen: the registry keeps looking
//	/ready     every process listens and is ready: nothing is left to watch
//
// Each phase measures one fixed window (idleWindow) however large b.N
// is: cpu-percent is the machine's CPU time over the window (/proc/stat)
// minus that of the same window measured with no processes at the start
// of the run, in percent of one CPU; registry-cpu-percent is this
// process's own (the registry, and nothing else of the benchmark runs
// during the window); shim-cpu-percent is env/local's shim server, which
// supervises the detached processes. On a busy machine cpu-percent is
// noisy (other work comes and goes); the per-process figures are not.
func BenchmarkIdleReadyWatch(b *testing.B) {
	dir := b.TempDir()
	bin := buildListener(b, dir)
	idleBaseline.once.Do(func() {
		idleBaseline.busy, idleBaseline.err = machineBusy(idleWindow)
	})
	if idleBaseline.err != nil {
		require.FailNow(b, fmt.Sprint(idleBaseline.err))
	}
	b.Run("watching", func(b *testing.B) { benchIdleWatch(b, bin, true) })
	b.Run("ready", func(b *testing.B) { benchIdleWatch(b, bin, false) })
}

// idleResults keeps each phase's figures: the window does not scale with
// b.N, so a phase is measured once and its figures reported again when
// the benchmark framework calls it with a larger b.N.
var idleResults sync.Map // phase name → [3]float64

func benchIdleWatch(b *testing.B, bin string, never bool) {
	if v, ok := idleResults.Load(b.Name()); ok {
		r := v.([3]float64)
		reportIdle(b, r)
		return
	}
	reg := benchRegistry(b)
	ctx := context.Background()
	flag := ""
	if never {
		flag = "-never "
	}
	// Distinct ports: each is held until all are chosen, since a port
	// given back may be the next one the kernel hands out.
	var (
		ports []int
		held  []net.Listener
	)
	for range idleWatchProcs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(b, err)
		held = append(held, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range held {
		l.Close()
	}
	ids := make([]string, 0, idleWatchProcs)
	for _, p := range ports {
		in, err := reg.Start(ctx, registry.StartOptions{Command: fmt.Sprintf("exec %s %s%d", bin, flag, p), Dir: "/",
			Ready: &registry.ReadyOptions{Port: p}})
		require.NoError(b, err)
		ids = append(ids, in.ID)
	}
	b.Cleanup(func() {
		reg.KillAll(context.Background(), registry.KillAllOptions{Grace: time.Second})
	})
	if !never {
		for _, id := range ids {
			if in, err := reg.WaitReady(ctx, id, time.Minute); err != nil || in.ReadyAt.IsZero() {
				require.FailNow(b, fmt.Sprintf("WaitReady %s: %v (state %s)", id, err, in.State))
			}
		}
	}
	shim := shimPIDs(b)
	self0, shim0 := selfCPU(), pidsCPU(shim)
	busy, err := machineBusy(idleWindow)
	require.NoError(b, err)
	self, shimUsed := selfCPU()-self0, pidsCPU(shim)-shim0
	// A process that died would make the window measure less watching.
	for _, id := range ids {
		if in, err := reg.Get(ctx, id); err != nil || in.State != registry.StateRunning {
			require.FailNow(b, fmt.Sprintf("%s is %s after the window (%v): the figures measured fewer processes", id, in.State, err))
		}
	}
	pct := func(d time.Duration) float64 { return 100 * float64(d) / float64(idleWindow) }
	r := [3]float64{pct(busy - idleBaseline.busy), pct(self), pct(shimUsed)}
	idleResults.Store(b.Name(), r)
	reportIdle(b, r)
	b.Logf("%d processes, %s window: machine %.1f%% of one CPU (idle baseline %.1f%%), registry %.2f%%, shim %.2f%% (load: %s)",
		len(ids), idleWindow, pct(busy), pct(idleBaseline.busy), r[1], r[2], loadAvg())
}

func reportIdle(b *testing.B, r [3]float64) {
	b.ReportMetric(r[0], "cpu-percent")
	b.ReportMetric(r[1], "registry-cpu-percent")
	b.ReportMetric(r[2], "shim-cpu-percent")
}

// machineBusy returns the CPU time all CPUs spent on anything but idling
// (and waiting for I/O) during the next window, from /proc/stat.
func machineBusy(window time.Duration) (time.Duration, error) {
	before, err := procStatBusy()
	if err != nil {
		return 0, err
	}
	time.Sleep(window)
	after, err := procStatBusy()
	if err != nil {
		return 0, err
	}
	return after - before, nil
}

// clockTick is USER_HZ, the unit of /proc/stat and /proc/PID/stat times:
// 100 on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

func procStatBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 6 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy int64
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %q: %w", line, err)
		}
		// user nice system idle iowait irq softirq steal guest guest_nice:
		// guest time is already counted in user and nice.
		if i == 3 || i == 4 || i >= 8 {
			continue
		}
		busy += n
	}
	return time.Duration(busy) * clockTick, nil
}

// selfCPU is this process's user and system CPU time.
func selfCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// shimPIDs returns the PIDs of env/local's shim servers started by this
// benchmark: processes of this test binary other than this one.
func shimPIDs(b *testing.B) []int {
	self, err := os.Executable()
	require.NoError(b, err)
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == self {
			pids = append(pids, pid)
		}
	}
	return pids
}

// pidsCPU sums utime and stime of pids (/proc/PID/stat).
func pidsCPU(pids []int) time.Duration {
	var sum int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the command, which may hold spaces: state is the
		// first, utime the 12th and stime the 13th.
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		sum += u + s
	}
	return time.Duration(sum) * clockTick
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
