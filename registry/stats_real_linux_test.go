//go:build linux

package registry

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/docker"
	"github.com/corralhq/corral/env/local"
	"github.com/corralhq/corral/internal/procstat"
)

// Helpers of the stats benchmarks and accuracy tests on real backends:
// a registry on env/local or in a docker container, and a meter of the
// CPU time that sampling could cost on each.

// statsBackend is a registry on one real backend with what a test needs
// around it.
type statsBackend struct {
	r *Registry
	// target is the backend processes start on.
	target string
	// psCommand lists the backend's processes as "PID PPID RSS" lines
	// (a header is skipped), run on the backend itself.
	psCommand string
	// cpu is the CPU time used so far by everything the sampling of this
	// backend runs on: see localCPU and dockerCPU.
	cpu func() (time.Duration, error)
	// engineCPU, when set, is the part of cpu that the machine's other
	// users share (the docker engine's daemons), shown apart so that a
	// window in which they were busy with others' work can be told.
	engineCPU func() (time.Duration, error)
	// treeCPU, when set, is the CPU time the kernel counts for a tree's
	// live members by its leader's PID (where the backend's PIDs are this
	// machine's).
	treeCPU func(leader int) (time.Duration, error)
}

// busyLoop is a loop that uses a core; timeout ends it should a crashed
// test leave it behind.
const busyLoop = "exec timeout 600 sh -c 'while :; do :; done'"

// newLocalStats is a registry on env/local as the daemon runs it
// (processes detached under the shim server), sampling unless disable.
func newLocalStats(tb testing.TB, disable bool, maxProcs int) *statsBackend {
	tb.Helper()
	if testing.Short() {
		tb.Skip("real processes: skipped with -short")
	}
	stateDir := tb.TempDir()
	r, err := New(Config{
		Open: func(ctx context.Context, target string) (env.Environment, error) {
			return local.New(local.Options{StateDir: stateDir, Logger: slog.New(slog.DiscardHandler)})
		},
		MaxProcesses: maxProcs,
		DefaultGrace: time.Second,
		Logger:       slog.New(slog.DiscardHandler),
		DisableStats: disable,
	})
	if err != nil {
		tb.Fatal(err)
	}
	closeOnCleanup(tb, r)
	return &statsBackend{
		r:         r,
		target:    "local",
		psCommand: "ps -e -o pid=,ppid=,rss=",
		cpu:       localCPU(stateDir),
		treeCPU:   localTreeCPU,
	}
}

// newDockerStats is a registry on a busybox container of its own (see
// benchContainerT: skipped without an engine unless
// CORRAL_REQUIRE_DOCKER=1), sampling unless disable.
func newDockerStats(tb testing.TB, disable bool, maxProcs int) *statsBackend {
	tb.Helper()
	if testing.Short() {
		tb.Skip("docker: skipped with -short")
	}
	cli, name := benchContainerT(tb)
	target := docker.SchemeContainer + name
	r, err := New(Config{
		Open: func(ctx context.Context, t string) (env.Environment, error) {
			return docker.Open(ctx, t, docker.Options{Logger: slog.New(slog.DiscardHandler)})
		},
		DefaultBackend: target,
		MaxProcesses:   maxProcs,
		DefaultGrace:   time.Second,
		Logger:         slog.New(slog.DiscardHandler),
		DisableStats:   disable,
	})
	if err != nil {
		tb.Fatal(err)
	}
	closeOnCleanup(tb, r)
	meter, engine, err := newDockerCPU(cli, name)
	if err != nil {
		tb.Skipf("cannot measure the docker engine's CPU from here: %v", err)
	}
	return &statsBackend{r: r, target: target, psCommand: "ps -o pid,ppid,rss", cpu: meter, engineCPU: engine}
}

func closeOnCleanup(tb testing.TB, r *Registry) {
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		r.KillAll(ctx, KillAllOptions{Signal: env.SIGKILL})
		r.Close()
	})
}

// start starts command on the backend.
func (sb *statsBackend) start(tb testing.TB, command string) Info {
	tb.Helper()
	in, err := sb.r.Start(context.Background(), StartOptions{Backend: sb.target, Command: command})
	if err != nil {
		tb.Fatalf("start %q: %v", command, err)
	}
	return in
}

// stats is the process's current figures, nil before the first sample.
func (sb *statsBackend) stats(tb testing.TB, id string) *Stats {
	tb.Helper()
	in, err := sb.r.Get(context.Background(), id)
	if err != nil {
		tb.Fatal(err)
	}
	return in.Stats
}

// waitStats waits until ok holds of the process's figures.
func (sb *statsBackend) waitStats(tb testing.TB, id string, what string, ok func(*Stats) bool) *Stats {
	tb.Helper()
	deadline := time.Now().Add(generous)
	for {
		if st := sb.stats(tb, id); st != nil && ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %v; last figures %+v", what, generous, sb.stats(tb, id))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// psTreeRSS is the resident memory of leader and its descendants as ps
// on the backend reports it, in bytes.
func (sb *statsBackend) psTreeRSS(tb testing.TB, leader int) int64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	res, err := sb.r.Run(ctx, RunOptions{StartOptions: StartOptions{Backend: sb.target, Command: sb.psCommand}})
	if err != nil || res.Status == nil || res.Status.Code != 0 {
		tb.Fatalf("%s: %v, %+v: %.300s", sb.psCommand, err, res.Status, res.Output)
	}
	type row struct{ ppid, rss int64 }
	rows := map[int64]row{}
	sc := bufio.NewScanner(bytes.NewReader(res.Output))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			continue
		}
		pid, err1 := strconv.ParseInt(f[0], 10, 64)
		ppid, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			continue // the header
		}
		rss, err := parsePSKiB(f[2])
		if err != nil {
			tb.Fatalf("ps: RSS %q: %v", f[2], err)
		}
		rows[pid] = row{ppid, rss}
	}
	if _, ok := rows[int64(leader)]; !ok {
		tb.Fatalf("ps does not list the leader %d: %.2000s", leader, res.Output)
	}
	in := func(pid int64) bool {
		for hops := 0; pid > 0 && hops < 64; hops++ {
			if pid == int64(leader) {
				return true
			}
			pid = rows[pid].ppid
		}
		return false
	}
	var sum int64
	for pid, r := range rows {
		if in(pid) {
			sum += r.rss
		}
	}
	return sum << 10
}

// parsePSKiB reads ps's RSS column: KiB, or for busybox above 99999 KiB
// a number with a k, m, g or t suffix ("200m").
func parsePSKiB(s string) (int64, error) {
	mult := 1.0
	switch s[len(s)-1] {
	case 'k':
		mult = 1
	case 'm':
		mult = 1 << 10
	case 'g':
		mult = 1 << 20
	case 't':
		mult = 1 << 30
	default:
		return strconv.ParseInt(s, 10, 64)
	}
	v, err := strconv.ParseFloat(s[:len(s)-1], 64)
	return int64(v * mult), err
}

// ownCPU is the CPU time of this process and of the children it reaped.
func ownCPU() time.Duration {
	var sum time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err == nil {
			sum += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	return sum
}

// procCPU is the CPU time of pid and of the children it reaped.
func procCPU(pid int) (time.Duration, error) {
	st, err := procstat.Read(pid)
	if err != nil {
		return 0, err
	}
	ticks := st.UTime + st.STime + st.CUTime + st.CSTime
	return time.Duration(ticks) * time.Second / procstat.TicksPerSecond, nil
}

// localCPU returns what sampling on env/local can cost: this process
// (the registry, and env/local's passes over /proc) and the shim server
// of stateDir, which detached processes run under. The server is looked
// for once, at the first call (it starts with the first detached
// process): the look reads every process's environment, which a window
// must not pay for.
func localCPU(stateDir string) func() (time.Duration, error) {
	shim := 0
	return func() (time.Duration, error) {
		if shim == 0 {
			pid, err := shimServer(stateDir)
			if err != nil {
				return 0, err
			}
			shim = pid
		}
		c, err := procCPU(shim)
		if err != nil {
			return 0, fmt.Errorf("the shim server %d: %w", shim, err)
		}
		return ownCPU() + c, nil
	}
}

// shimServer finds the shim server of stateDir by its environment.
func shimServer(stateDir string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	needle := []byte("\x00CORRAL_LOCAL_SHIM=2:" + stateDir + "\x00")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && bytes.Contains(append([]byte{0}, b...), needle) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no shim server of %s", stateDir)
}

// newDockerCPU returns what sampling in container name can cost: this
// process, the engine's daemons (dockerd, containerd), the container's
// containerd-shim with the execs it reaped, and the container's cgroup
// (the resident shells that read /proc). An exec reaped by the shim
// during a window is counted twice (shim and cgroup): an overestimate, and
// rare, since sampling uses resident shells, not an exec per round.
func newDockerCPU(cli *client.Client, name string) (all, engine func() (time.Duration, error), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ins, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err != nil {
		return nil, nil, err
	}
	initPID := ins.Container.State.Pid
	init, err := procstat.Read(initPID)
	if err != nil {
		return nil, nil, fmt.Errorf("the container's init %d is not in this PID namespace: %w", initPID, err)
	}
	shim := init.PPID
	var daemons []int
	for _, comm := range []string{"dockerd", "containerd"} {
		pid, err := findComm(comm)
		if err != nil {
			return nil, nil, err
		}
		daemons = append(daemons, pid)
	}
	usage, err := cgroupCPUReader(initPID)
	if err != nil {
		return nil, nil, err
	}
	sumOf := func(pids []int) (time.Duration, error) {
		var sum time.Duration
		for _, pid := range pids {
			c, err := procCPU(pid)
			if err != nil {
				return 0, fmt.Errorf("process %d: %w", pid, err)
			}
			sum += c
		}
		return sum, nil
	}
	engine = func() (time.Duration, error) { return sumOf(daemons) }
	all = func() (time.Duration, error) {
		own, err := sumOf([]int{shim})
		if err != nil {
			return 0, err
		}
		eng, err := engine()
		if err != nil {
			return 0, err
		}
		c, err := usage()
		return ownCPU() + own + eng + c, err
	}
	return all, engine, nil
}

// localTreeCPU is the CPU time of leader and its live descendants, user
// plus system, from their /proc/PID/stat.
func localTreeCPU(leader int) (time.Duration, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	stats := map[int]procstat.Stat{}
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			if st, err := procstat.Read(pid); err == nil {
				stats[pid] = st
			}
		}
	}
	if _, ok := stats[leader]; !ok {
		return 0, fmt.Errorf("no process %d", leader)
	}
	var ticks uint64
	for pid, st := range stats {
		for p, hops := pid, 0; p > 0 && hops < 64; p, hops = stats[p].PPID, hops+1 {
			if p == leader {
				ticks += st.UTime + st.STime
				break
			}
		}
	}
	return time.Duration(ticks) * time.Second / procstat.TicksPerSecond, nil
}

// findComm returns the PID of the process whose command name is comm.
func findComm(comm string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := procstat.Read(pid); err == nil && st.Comm == comm {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no %s process in this PID namespace", comm)
}

// cgroupCPUReader returns a reader of the CPU time used in pid's cgroup:
// cpu.stat's usage_usec on cgroup v2, cpuacct.usage on v1.
func cgroupCPUReader(pid int) (func() (time.Duration, error), error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil, err
	}
	var candidates []string
	for line := range strings.Lines(string(b)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			candidates = append(candidates, filepath.Join("/sys/fs/cgroup", parts[2], "cpu.stat"))
		case strings.Contains(","+parts[1]+",", ",cpuacct,"):
			candidates = append(candidates,
				filepath.Join("/sys/fs/cgroup", parts[1], parts[2], "cpuacct.usage"),
				filepath.Join("/sys/fs/cgroup/cpuacct", parts[2], "cpuacct.usage"))
		}
	}
	for _, path := range candidates {
		read := func() (time.Duration, error) {
			b, err := os.ReadFile(path)
			if err != nil {
				return 0, err
			}
			if filepath.Base(path) == "cpuacct.usage" {
				ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
				return time.Duration(ns), err
			}
			for line := range strings.Lines(string(b)) {
				if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
					us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					return time.Duration(us) * time.Microsecond, err
				}
			}
			return 0, fmt.Errorf("%s has no usage_usec", path)
		}
		if _, err := read(); err == nil {
			return read, nil
		}
	}
	return nil, fmt.Errorf("no readable CPU figure of the cgroup of %d among %v", pid, candidates)
}
