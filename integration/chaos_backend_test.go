package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/ssh/sshtest"
	"github.com/corralhq/corral/internal/testing/proctest"
	"github.com/corralhq/corral/registry"
)

// Item 1 of the fault suite: one sick backend must not freeze every
// listing and kill. A real daemon holds processes on a healthy backend
// and on a sick one (a paused container; an SSH host whose sshd is killed,
// or whose route the test blackholes), and every listing (ps, ps -a, ps
// --json, the API list an MCP "process list" makes) must come back within
// chaosListBound, showing the sick backend's condition and "?" for ports
// it cannot tell; a kill of a process there must come back within the
// grace plus chaosKillSlack, reported not killed (unreachable) with the
// kill pending; once the backend answers again, the pending kill runs and
// a kill_finished event says it did; nothing is left running.

const (
	// chaosListBound is the bound for a listing, for an API call.
	chaosListBound = time.Second
	// chaosCLIOverhead is what a corral process adds around its call on a
	// loaded two-core machine: exec, start-up, the socket.
	chaosCLIOverhead = time.Second
	// chaosKillSlack bounds a kill beyond its grace: one backend call's
	// deadline (5 s) and the verification on a loaded machine.
	chaosKillSlack = 8 * time.Second
	// chaosHealBound bounds how long after a backend answers again its
	// pending kill has run: a health check round (1 s while sick), the
	// kill and its verification.
	chaosHealBound = 30 * time.Second
)

// chaosPS runs `corral args...` (a listing) within the CLI bound and
// returns its stdout.
func chaosPS(t *testing.T, h *daemonHome, args ...string) string {
	t.Helper()
	var r cliResult
	chaosWithin(t, "corral "+strings.Join(args, " "), chaosListBound+chaosCLIOverhead, func() { r = h.run(args...) })
	if r.code != 0 {
		require.FailNow(t, fmt.Sprintf("corral %s: exit %d: %s", strings.Join(args, " "), r.code, r.stderr))
	}
	return r.stdout
}

// chaosAPIList lists through the daemon's API with ports, as the MCP
// server's "process list" does, within chaosListBound.
func chaosAPIList(t *testing.T, c *daemon.Client) map[string]registry.Info {
	t.Helper()
	var list []registry.Info
	var err error
	chaosWithin(t, "GET /v1/processes?all=1&ports=1", chaosListBound, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		list, err = c.List(ctx, registry.ListOptions{All: true, Ports: true})
	})
	require.NoError(t, err, "list")
	m := map[string]registry.Info{}
	for _, in := range list {
		m[in.ID] = in
	}
	return m
}

// chaosPSUntil runs `corral args...` every 100 ms until cond holds for
// its output (each run within the CLI bound, as chaosPS checks it but
// without a log line each) and returns that output.
func chaosPSUntil(t *testing.T, h *daemonHome, what string, cond func(out string) bool, args ...string) string {
	t.Helper()
	bound := chaosListBound + chaosCLIOverhead
	deadline := time.Now().Add(time.Minute)
	var slowest time.Duration
	for {
		began := time.Now()
		r := h.run(args...)
		took := time.Since(began)
		slowest = max(slowest, took)
		if took > bound {
			assert.Fail(t, fmt.Sprintf("chaos: corral %s took %s, over its bound of %s", strings.Join(args, " "), took.Round(time.Millisecond), bound))
		}
		if r.code == 0 && cond(r.stdout) {
			t.Logf("chaos: corral %s (until %s): each within %s (bound %s)", strings.Join(args, " "), what, slowest.Round(time.Millisecond), bound)
			return r.stdout
		}
		require.Falsef(t, time.Now().After(deadline), "timed out waiting for %s; last output (exit %d):\n%s%s", what, r.code, r.stdout, r.stderr)
		time.Sleep(100 * time.Millisecond)
	}
}

// psLine returns the line of `corral ps` output that lists id.
func psLine(out, id string) string {
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, id+" ") {
			return line
		}
	}
	return ""
}

// chaosStart starts command on backend and returns its ID.
func chaosStart(t *testing.T, h *daemonHome, backend, command string) string {
	t.Helper()
	return strings.TrimSpace(h.mustRun("start", "--backend", backend, "--", command))
}

// chaosKill runs `corral args...` (a kill) within grace plus
// chaosKillSlack and returns its result.
func chaosKill(t *testing.T, h *daemonHome, grace time.Duration, args ...string) cliResult {
	t.Helper()
	var r cliResult
	chaosWithin(t, "corral "+strings.Join(args, " "), grace+chaosKillSlack+chaosCLIOverhead, func() { r = h.run(args...) })
	return r
}

// waitKillFinished waits until the daemon's event history holds a
// kill_finished event for id and returns it.
func waitKillFinished(t *testing.T, c *daemon.Client, id string, bound time.Duration) registry.Event {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		evs, err := c.History(ctx)
		cancel()
		if err == nil {
			for _, ev := range evs {
				if ev.Type == registry.EventKillFinished && ev.ID == id {
					return ev
				}
			}
		}
		require.Falsef(t, time.Now().After(deadline), "no kill_finished event for %s within %s after the backend came back (last error %v)", id, bound, err)
		time.Sleep(50 * time.Millisecond)
	}
}

// TestChaosBackendDockerPause: `docker pause` of a container with a
// running process.
func TestChaosBackendDockerPause(t *testing.T) {
	cli := requireDocker(t)
	bin := buildCorral(t)
	since := time.Now()
	marker := "chaos-pause-" + strconv.Itoa(os.Getpid())
	name := startUserContainer(t, cli)
	target := "docker://" + name
	h := newDaemonHome(t, bin)
	h.startServe("--log-level", "debug")
	t.Cleanup(h.logOnFailure)
	c := daemon.NewClient(h.socket)
	t.Cleanup(c.CloseIdle)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ins, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	require.NoError(t, err)
	id := ins.Container.ID
	cancel()
	pause := func() {
		waitExecsSettled(t, id)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := cli.ContainerPause(ctx, name, client.ContainerPauseOptions{})
		require.NoError(t, err, "docker pause")
	}
	unpause := func() { chaosUnpause(t, cli, name, id) }
	t.Cleanup(unpause) // before the daemon home's cleanup kills what is left

	// The container's processes are this machine's: the marker finds them.
	sick := chaosStart(t, h, target, "nc -l -p 7001; : "+marker)
	killAllVictim := chaosStart(t, h, target, "sleep 3600; : "+marker+"-all")
	healthy := chaosStart(t, h, "local", "sleep 3600; : "+marker)
	chaosPSUntil(t, h, "the server's port shows", func(out string) bool { return strings.Contains(psLine(out, sick), "7001") }, "ps")

	pause()

	// Listings: within their bound at once, and the condition shows as
	// soon as a health check has seen it (the first listing that finds
	// the backend slow asks for one).
	out := chaosPSUntil(t, h, "the container shows paused", func(out string) bool {
		return strings.Contains(psLine(out, sick), "running ("+target+" paused)")
	}, "ps")
	if line := psLine(out, sick); !strings.Contains(line, " ? ") {
		assert.Fail(t, fmt.Sprintf("ps: the paused process's ports are not \"?\": %q", line))
	}
	if line := psLine(out, healthy); !strings.Contains(line, "running ") || strings.Contains(line, "paused") {
		assert.Fail(t, fmt.Sprintf("ps: the local process is not listed as plainly running: %q", line))
	}
	if line := psLine(chaosPS(t, h, "ps", "-a"), sick); !strings.Contains(line, "paused") {
		assert.Fail(t, fmt.Sprintf("ps -a: %q", line))
	}
	var infos []registry.Info
	require.NoError(t, json.Unmarshal([]byte(chaosPS(t, h, "ps", "--json")), &infos))
	for _, in := range infos {
		assert.Truef(t, in.ID != sick || in.BackendCondition == env.ConditionPaused && in.PortsUnknown, "ps --json: %s has condition %q, ports_unknown %v", sick, in.BackendCondition, in.PortsUnknown)
	}
	api := chaosAPIList(t, c)
	if in := api[sick]; in.BackendCondition != env.ConditionPaused || in.State != registry.StateRunning {
		assert.Fail(t, fmt.Sprintf("API list: %s is %s with condition %q", sick, in.State, in.BackendCondition))
	}
	// Every socket of the paused backend: refused at once, saying why.
	var ports cliResult
	chaosWithin(t, "corral ports --backend "+target, chaosListBound+chaosCLIOverhead, func() { ports = h.run("ports", "--backend", target) })
	assert.Truef(t, ports.code != 0 && strings.Contains(ports.stderr, "paused"), "ports of a paused container: exit %d, stdout %q, stderr %q", ports.code, ports.stdout, ports.stderr)
	chaosShortError(t, ports.stderr)
	doctor := h.run("doctor")
	assert.Truef(t, strings.Contains(doctor.stdout, "open "+target) && strings.Contains(doctor.stdout, "paused"), "doctor does not show %s paused:\n%s", target, doctor.stdout)

	// kill --grace 1s: not killed, pending, said in a short line.
	r := chaosKill(t, h, time.Second, "kill", "--grace", "1s", sick)
	assert.Truef(t, r.code != 0 && strings.Contains(r.stdout, sick+" NOT killed, unreachable"), "kill of a process in a paused container: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	chaosShortError(t, r.stderr)
	line := psLine(chaosPS(t, h, "ps"), sick)
	assert.Truef(t, strings.Contains(line, "kill pending"), "ps after the kill: %q", line)

	// kill --all: the local process is killed, the paused ones are not.
	r = chaosKill(t, h, time.Second, "kill", "--all", "--grace", "1s")
	assert.Truef(t, strings.Contains(r.stdout, healthy+" killed") && strings.Contains(r.stdout, killAllVictim+" NOT killed, unreachable"), "kill --all: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	chaosShortError(t, r.stderr)

	// The container comes back: both pending kills run, and say so.
	unpause()
	for _, id := range []string{sick, killAllVictim} {
		ev := waitKillFinished(t, c, id, chaosHealBound)
		assert.Truef(t, ev.Kill != nil && ev.Kill.State == registry.StateKilled && !ev.Kill.Unreachable, "kill_finished for %s: %+v", id, ev.Kill)
	}
	api = chaosAPIList(t, c)
	for _, id := range []string{sick, killAllVictim} {
		in := api[id]
		assert.Truef(t, in.State == registry.StateKilled && !in.KillPending && in.BackendCondition == "", "after the container came back, %s is %s (kill pending %v, condition %q)", id, in.State, in.KillPending, in.BackendCondition)
	}

	// shutdown --kill-all while paused: bounded, and what it could not
	// reach is reported so; the next daemon finishes the kill.
	last := chaosStart(t, h, target, "sleep 3600; : "+marker+"-last")
	pause()
	r = chaosKill(t, h, 5*time.Second, "shutdown", "--kill-all")
	assert.Truef(t, strings.Contains(r.stdout, last+" NOT killed, unreachable"), "shutdown --kill-all with a paused container: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	chaosShortError(t, r.stderr)
	if h.serve != nil {
		h.serve.Wait()
		h.serve = nil
	}
	unpause()
	h.startServe("--log-level", "debug")
	// The new daemon may run the kill while it recovers, before its event
	// history listens: the state tells.
	waitCond(t, "the pending kill to run after the restart", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		in, err := c.Get(ctx, last)
		return err == nil && in.State == registry.StateKilled && !in.KillPending
	})

	h.mustRun("shutdown", "--kill-all")
	if h.serve != nil {
		h.serve.Wait()
		h.serve = nil
	}
	// This also covers what the first daemon's engine could not end while
	// the container was paused (its armed spares): ending those is the
	// spares' own business (they must end when their engine goes away, or
	// be swept by the next engine), not the kill's.
	chaosNoLeftovers(t, since, 30*time.Second, marker)
}

// logOnFailure logs the end of the daemon's log when the test failed.
func (h *daemonHome) logOnFailure() {
	t, ok := h.t.(*testing.T)
	if !ok || !t.Failed() {
		return
	}
	b, _ := os.ReadFile(filepath.Join(h.home, "serve.log"))
	if len(b) > 16<<10 {
		b = b[len(b)-16<<10:]
	}
	t.Logf("the end of the daemon's log:\n%s", b)
}

// waitExecsSettled waits until no exec is being set up in container id:
// no runc process names it and no `runc init` is on its way in. A pause
// that catches an exec half-way in freezes it in the container's cgroup,
// and the engine then hangs on the container until it is thawed by hand
// (a runc race, not corral's): the test pauses between execs, as a person
// would most of the time. A follow or a start that corral opens later
// meets a paused container and is refused at once.
func waitExecsSettled(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for quiet := 0; quiet < 3; {
		if runcBusy(id) {
			quiet = 0
		} else {
			quiet++
		}
		if time.Now().After(deadline) {
			require.FailNow(t, fmt.Sprintf("execs into container %s did not settle within a minute", id[:12]))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runcBusy reports whether a runc process is at work on container id.
func runcBusy(id string) bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.HasPrefix(string(cmd), "runc") {
			continue
		}
		if strings.Contains(string(cmd), id) {
			return true
		}
		if cg, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup")); err == nil && strings.Contains(string(cg), id) {
			return true
		}
	}
	return false
}

// chaosUnpause unpauses the container (name, id). An exec that the engine
// began just as the container was paused can be left frozen half-way into
// it (runc init in the frozen cgroup, holding the container's lock), and
// then the engine's unpause waits for ever: a runc race, not corral's. The
// test then thaws its own container's freezer cgroup, which lets both
// finish.
func chaosUnpause(t *testing.T, cli *client.Client, name, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, err := cli.ContainerUnpause(ctx, name, client.ContainerUnpauseOptions{})
	if err == nil || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return
	}
	t.Logf("docker unpause %s hangs (an exec caught by the pause); thawing its freezer cgroup", name)
	for _, f := range []string{
		"/sys/fs/cgroup/freezer/docker/" + id + "/freezer.state",
		"/sys/fs/cgroup/system.slice/docker-" + id + ".scope/cgroup.freeze",
		"/sys/fs/cgroup/docker/" + id + "/cgroup.freeze",
	} {
		v := "0"
		if strings.HasSuffix(f, "freezer.state") {
			v = "THAWED"
		}
		if os.WriteFile(f, []byte(v), 0o644) == nil {
			break
		}
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	_, _ = cli.ContainerUnpause(ctx2, name, client.ContainerUnpauseOptions{})
}

// chaosRelay is a loopback TCP relay to one address that the test can
// blackhole: it then stops forwarding in both directions without closing
// anything, as a route that drops packets does, until heal (TCP then
// delivers what was held).
type chaosRelay struct {
	ln    net.Listener
	to    string
	mu    sync.Mutex
	cond  *sync.Cond
	holed bool
	done  bool
	conns []net.Conn
}

func newChaosRelay(t *testing.T, to string) *chaosRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &chaosRelay{ln: ln, to: to}
	r.cond = sync.NewCond(&r.mu)
	go r.serve()
	t.Cleanup(r.close)
	return r
}

func (r *chaosRelay) port() int { return r.ln.Addr().(*net.TCPAddr).Port }

func (r *chaosRelay) serve() {
	for {
		in, err := r.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", r.to)
		if err != nil {
			in.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, in, out)
		r.mu.Unlock()
		go r.pipe(out, in)
		go r.pipe(in, out)
	}
}

// pipe copies src to dst, holding each chunk while the relay is
// blackholed.
func (r *chaosRelay) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			r.mu.Lock()
			for r.holed && !r.done {
				r.cond.Wait()
			}
			r.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (r *chaosRelay) blackhole() { r.set(true) }
func (r *chaosRelay) heal()      { r.set(false) }

func (r *chaosRelay) set(holed bool) {
	r.mu.Lock()
	r.holed = holed
	r.cond.Broadcast()
	r.mu.Unlock()
}

func (r *chaosRelay) close() {
	r.ln.Close()
	r.mu.Lock()
	r.done = true
	r.cond.Broadcast()
	conns := r.conns
	r.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// trustRelay lets h's daemon reach srv through relay: the relay's port
// gets srv's host keys in known_hosts.
func (h *daemonHome) trustRelay(srv *sshtest.Server, relay *chaosRelay) {
	h.t.Helper()
	b, err := os.ReadFile(srv.KnownHosts)
	require.NoError(h.t, err)
	from := fmt.Sprintf("[%s]:%d ", srv.Host, srv.Port)
	to := fmt.Sprintf("[%s]:%d ", srv.Host, relay.port())
	f, err := os.OpenFile(filepath.Join(h.home, ".ssh", "known_hosts"), os.O_APPEND|os.O_WRONLY, 0o600)
	require.NoError(h.t, err)
	defer f.Close()
	if _, err := io.WriteString(f, strings.ReplaceAll(string(b), from, to)); err != nil {
		require.FailNow(h.t, fmt.Sprint(err))
	}
}

// TestChaosBackendSSH: an SSH host whose route goes silent (a TCP
// blackhole the test controls), then one whose sshd is killed.
func TestChaosBackendSSH(t *testing.T) {
	sshtest.Require(t)
	bin := buildCorral(t)
	since := time.Now()
	marker := proctest.Marker()
	t.Cleanup(func() { proctest.KillWith(marker) })
	srv := sshtest.Start(t)
	relay := newChaosRelay(t, srv.Addr())
	h := newDaemonHome(t, bin)
	h.trustSSH(srv)
	h.trustRelay(srv, relay)
	h.startServe("--log-level", "debug")
	t.Cleanup(h.logOnFailure)
	c := daemon.NewClient(h.socket)
	t.Cleanup(c.CloseIdle)
	silent := fmt.Sprintf("ssh://%s@%s:%d", srv.User, srv.Host, relay.port())
	direct := srv.Target()

	// The commands run on this machine: the marker finds them.
	healthy := chaosStart(t, h, "local", "sleep 3600; : "+marker)
	quiet := chaosStart(t, h, silent, "sleep 3600; : "+marker)
	waitCond(t, "the process over the relay to run", func() bool {
		return len(proctest.PIDsWithWord(marker)) >= 2
	})

	// The route goes silent.
	relay.blackhole()
	out := chaosPSUntil(t, h, "the silent host shows unreachable", func(out string) bool {
		return strings.Contains(psLine(out, quiet), "running ("+silent+" unreachable)")
	}, "ps")
	line := psLine(out, healthy)
	assert.Falsef(t, strings.Contains(line, "unreachable"), "ps: the local process shows another backend's condition: %q", line)
	chaosAPIList(t, c)
	r := chaosKill(t, h, time.Second, "kill", "--grace", "1s", quiet)
	assert.Truef(t, r.code != 0 && strings.Contains(r.stdout, quiet+" NOT killed, unreachable"), "kill over a blackholed route: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	chaosShortError(t, r.stderr)
	relay.heal()
	if ev := waitKillFinished(t, c, quiet, chaosHealBound); ev.Kill == nil || ev.Kill.State != registry.StateKilled {
		assert.Fail(t, fmt.Sprintf("kill_finished after the route healed: %+v", ev.Kill))
	}

	// sshd dies, with every connection it served.
	down := chaosStart(t, h, direct, "sleep 3600; : "+marker+"; :")
	waitCond(t, "the process on the direct target to run", func() bool { return psLine(h.mustRun("ps"), down) != "" })
	srv.Stop()
	chaosPSUntil(t, h, "the host shows down", func(out string) bool {
		return strings.Contains(psLine(out, down), "running ("+direct+" unreachable)")
	}, "ps")
	r = chaosKill(t, h, time.Second, "kill", "--grace", "1s", down)
	assert.Truef(t, r.code != 0 && strings.Contains(r.stdout, down+" NOT killed, unreachable"), "kill with sshd down: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	chaosShortError(t, r.stderr)
	r = chaosKill(t, h, time.Second, "kill", "--all", "--grace", "1s")
	assert.Truef(t, strings.Contains(r.stdout, healthy+" killed") && strings.Contains(r.stdout, down+" NOT killed, unreachable"), "kill --all with sshd down: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	srv.Restart(t)
	ev := waitKillFinished(t, c, down, chaosHealBound)
	assert.Truef(t, ev.Kill != nil && ev.Kill.State == registry.StateKilled, "kill_finished after sshd came back: %+v", ev.Kill)
	left := proctest.PIDsWithWord(marker)
	assert.Truef(t, len(left) <= 0, "processes of the test still run after every kill finished: %v", left)

	h.mustRun("shutdown", "--kill-all")
	if h.serve != nil {
		h.serve.Wait()
		h.serve = nil
	}
	chaosNoLeftovers(t, since, 30*time.Second, marker)
}
