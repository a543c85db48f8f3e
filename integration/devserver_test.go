package integration

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env/ssh/sshtest"
	"github.com/corralhq/corral/internal/shellquote"
	"github.com/corralhq/corral/registry"
)

// devBackend is one backend of TestDevServer: its daemon, its target and
// how the test gets a real HTTP server (busybox httpd) on a port of its
// sandbox, run by corral or by someone else.
type devBackend struct {
	h      *daemonHome
	target string
	// freePort returns a TCP port nothing in the sandbox listens on.
	freePort func(t *testing.T) int
	// prep is a command prefix that makes the site httpd serves ("" when
	// the test made it on this machine); httpd is the server's command,
	// without exec.
	prep  string
	httpd func(port int) string
	// foreign starts an httpd on port that corral did not start.
	foreign func(t *testing.T, port int)
}

// server is the command line of a dev server on port.
func (b *devBackend) server(port int) string { return b.prep + "exec " + b.httpd(port) }

// TestDevServer drives dev servers (#18) through the corral binary and one
// daemon per backend, as a user would, on the local, docker and ssh
// backends (in parallel, each a sequence of short steps): readiness by
// port, by pattern and by URL with wait --ready and ps; a port a foreign
// process holds neither makes a corral process ready nor is killed by
// kill --port; a server that ends before it is ready; names reused,
// refused and replaced; kill --port of a corral server; TTL expiry; the
// crash of a ready server.
//
// It takes longer than 5 s (each backend runs about 40 corral commands,
// a 1 s TTL and a 1 s wait --ready timeout; docker creates a sandbox):
// the backends share one binary and run side by side, so the test takes
// about as long as its slowest backend.
func TestDevServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the corral binary, a docker sandbox and sshd")
	}
	bin := buildCorral(t)
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("busybox (its httpd is the dev server) is not installed")
	}

	// On this machine (local and ssh): ports of the host, a site in a
	// temporary directory, foreign servers started by the test.
	hostPort := func(t *testing.T) int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	hostSite := func(t *testing.T) string {
		site := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(site, "index.html"), []byte("hi\n"), 0o644))
		return site
	}
	hostHTTPD := func(site string) func(int) string {
		return func(port int) string {
			return fmt.Sprintf("%s httpd -f -p 127.0.0.1:%d -h %s", shellquote.Quote(busybox), port, shellquote.Quote(site))
		}
	}
	hostForeign := func(t *testing.T, port int) {
		cmd := exec.Command(busybox, "httpd", "-f", "-p", fmt.Sprintf("127.0.0.1:%d", port), "-h", t.TempDir())
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}

	t.Run("local", func(t *testing.T) {
		t.Parallel()
		b := &devBackend{h: newDaemonHome(t, bin), target: "local", freePort: hostPort,
			httpd: hostHTTPD(hostSite(t)), foreign: hostForeign}
		b.h.startServe()
		b.run(t)
	})
	t.Run("docker", func(t *testing.T) {
		t.Parallel()
		cli := requireDocker(t)
		sandbox := uniqueName("corral-devserver-")
		// Registered first, so that it runs after the daemon's shutdown.
		t.Cleanup(func() { removeContainer(cli, sandbox) })
		b := &devBackend{h: newDaemonHome(t, bin),
			// network=none: the sandbox's own loopback, where any port is free.
			target:   "docker-image://" + dockerTestImage + "?network=none&name=" + sandbox,
			freePort: func(*testing.T) int { return 20000 + rand.IntN(20000) },
			prep:     "mkdir -p /tmp/www && echo hi >/tmp/www/index.html; ",
			httpd:    func(port int) string { return fmt.Sprintf("httpd -f -p 127.0.0.1:%d -h /tmp/www", port) },
			// The sandbox exists once the first step started something in it.
			foreign: func(t *testing.T, port int) {
				dockerExec(t, sandbox, "httpd", "-p", fmt.Sprintf("127.0.0.1:%d", port), "-h", "/tmp")
			},
		}
		b.h.startServe()
		b.run(t)
	})
	t.Run("ssh", func(t *testing.T) {
		t.Parallel()
		sshtest.Require(t) // skips, or fails under CORRAL_REQUIRE_SSH=1
		srv := sshtest.Start(t)
		// The host is this machine: its ports, and foreign servers started
		// here, are the ssh sandbox's.
		b := &devBackend{h: newDaemonHome(t, bin), target: srv.Target(), freePort: hostPort,
			httpd: hostHTTPD(hostSite(t)), foreign: hostForeign}
		b.h.trustSSH(srv)
		b.h.startServe()
		b.run(t)
	})
}

// run runs the steps in order. TTL comes first: its ttl_expired event is
// one the registry's global rate limit (15 events per 10 s) may hold back,
// and the steps after it publish more than that.
func (b *devBackend) run(t *testing.T) {
	t.Run("TTL", b.ttl)
	t.Run("ReadyByPortNameReuseReplaceKillPort", b.readyByPort)
	t.Run("ReadyByPattern", b.readyByPattern)
	t.Run("ReadyByURL", b.readyByURL)
	t.Run("ForeignHolder", b.foreignHolder)
	t.Run("CrashedAfterReady", b.crashed)
}

// start runs corral start on the backend and returns the ID it printed.
func (b *devBackend) start(t *testing.T, command string, flags ...string) string {
	t.Helper()
	args := append([]string{"start", "--backend", b.target}, flags...)
	id := strings.TrimSpace(b.h.mustRun(append(args, "--", command)...))
	require.True(t, registry.ValidID(id), "start printed %q", id)
	return id
}

// waitReady runs corral wait --ready and requires exit 0.
func (b *devBackend) waitReady(t *testing.T, id string) {
	t.Helper()
	r := b.h.run("wait", "--ready", "--timeout", "2m", id)
	require.Equal(t, 0, r.code, "wait --ready %s: stdout %q stderr %q\nps:\n%s", id, r.stdout, r.stderr, b.h.mustRun("ps", "-a"))
}

// info returns the process id as ps -a --json lists it.
func (b *devBackend) info(t *testing.T, id string) registry.Info {
	t.Helper()
	for _, in := range b.h.list("") {
		if in.ID == id {
			return in
		}
	}
	require.FailNow(t, fmt.Sprintf("ps -a does not list %s", id))
	return registry.Info{}
}

// requirePSReady requires corral ps to show id running and ready, with
// port in its PORTS column (the port may appear a moment after readiness
// when a pattern made it ready).
func (b *devBackend) requirePSReady(t *testing.T, id, name string, port int) {
	t.Helper()
	row := fmt.Sprintf(`(?m)^%s\s+%s\s+.*\srunning, ready\s+.*\s%d\s`, id, regexp.QuoteMeta(name), port)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Regexp(c, row, b.h.mustRun("ps"))
	}, time.Minute, 20*time.Millisecond, "ps shows %s (%s) ready on port %d", id, name, port)
}

// events returns the daemon's recent events (corral events --json).
func (b *devBackend) events(t *testing.T) []registry.Event {
	t.Helper()
	var evs []registry.Event
	require.NoError(t, json.Unmarshal([]byte(b.h.mustRun("events", "--json")), &evs))
	return evs
}

// event waits for an event of type typ about id and returns it.
func (b *devBackend) event(t *testing.T, id string, typ registry.EventType) registry.Event {
	t.Helper()
	var found registry.Event
	require.Eventually(t, func() bool {
		for _, ev := range b.events(t) {
			if ev.ID == id && ev.Type == typ {
				found = ev
				return true
			}
		}
		return false
	}, time.Minute, 20*time.Millisecond, "no %s event for %s", typ, id)
	return found
}

func (b *devBackend) ttl(t *testing.T) {
	id := b.start(t, "sleep 600", "--name", "short", "--ttl", "1s")
	var in registry.Info
	require.Eventually(t, func() bool {
		in = b.info(t, id)
		return in.State != registry.StateRunning
	}, time.Minute, 20*time.Millisecond)
	assert.Equal(t, registry.StateTimedOut, in.State)
	assert.Equal(t, registry.TimedOutTTL, in.TimedOut)
	assert.Equal(t, time.Second, in.TTL.D())
	ev := b.event(t, id, registry.EventTTLExpired)
	assert.Contains(t, ev.Summary, id)
}

func (b *devBackend) readyByPort(t *testing.T) {
	port := b.freePort(t)
	p := strconv.Itoa(port)
	id := b.start(t, b.server(port), "--name", "web", "--ready-port", p)
	b.waitReady(t, "web")
	b.requirePSReady(t, id, "web", port)
	assert.False(t, b.info(t, id).ReadyAt.IsZero(), "ready_at")

	// The same name and command: the running server, said on stderr.
	r := b.h.run("start", "--backend", b.target, "--name", "web", "--ready-port", p, "--", b.server(port))
	require.Equal(t, 0, r.code, "stderr %q", r.stderr)
	assert.Equal(t, id+"\n", r.stdout)
	assert.Contains(t, r.stderr, "reused "+id+" (web)")

	// Another command under that name is refused, naming the holder.
	r = b.h.run("start", "--backend", b.target, "--name", "web", "--", "sleep 600")
	assert.NotEqual(t, 0, r.code)
	assert.Empty(t, r.stdout)
	assert.Contains(t, r.stderr, "name web is held by "+id)
	assert.Contains(t, r.stderr, "--replace")

	// --replace kills the holder first, so the new server gets the port.
	id2 := b.start(t, b.server(port), "--name", "web", "--replace", "--ready-port", p)
	require.NotEqual(t, id, id2)
	assert.Equal(t, registry.StateKilled, b.info(t, id).State)
	b.waitReady(t, "web")
	b.requirePSReady(t, id2, "web", port)

	r = b.h.run("kill", "--port", p, "--backend", b.target)
	require.Equal(t, 0, r.code, "kill --port: stdout %q stderr %q", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, id2+" killed")
	assert.Equal(t, registry.StateKilled, b.info(t, id2).State)
	r = b.h.run("kill", "--port", p, "--backend", b.target)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, fmt.Sprintf("corral: kill: nothing listens on port %d", port))
}

func (b *devBackend) readyByPattern(t *testing.T) {
	port := b.freePort(t)
	// The line comes before the socket: ready by the line alone.
	id := b.start(t, fmt.Sprintf("echo starting; sleep 0.2; echo serving on %d; %s", port, b.server(port)),
		"--name", "pat", "--ready-pattern", `^serving on [0-9]+$`)
	b.waitReady(t, id)
	b.requirePSReady(t, id, "pat", port)
	b.h.mustRun("kill", id)
}

func (b *devBackend) readyByURL(t *testing.T) {
	port := b.freePort(t)
	id := b.start(t, b.server(port), "--name", "api", "--ready-url", fmt.Sprintf("http://127.0.0.1:%d/", port))
	b.waitReady(t, "api")
	b.requirePSReady(t, id, "api", port)
	b.h.mustRun("kill", "api")
}

func (b *devBackend) foreignHolder(t *testing.T) {
	port := b.freePort(t)
	p := strconv.Itoa(port)
	b.foreign(t, port)
	// ports lists it without an owner once it listens.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Regexp(c, fmt.Sprintf(`(?m)^%d\s+\S+\s+\d+\s+-\s+\S`, port), b.h.mustRun("ports", "--backend", b.target))
	}, time.Minute, 20*time.Millisecond, "corral ports shows the foreign httpd without an owner")

	// A corral process that waits for the port is not made ready by it.
	id := b.start(t, "sleep 600", "--ready-port", p)
	r := b.h.run("wait", "--ready", "--timeout", "1s", id)
	assert.Equal(t, 124, r.code, "wait --ready: stdout %q stderr %q", r.stdout, r.stderr)
	assert.Contains(t, b.h.mustRun("ps"), "running, not ready")
	b.h.mustRun("kill", id)

	// kill --port refuses, naming the holder.
	r = b.h.run("kill", "--port", p, "--backend", b.target)
	assert.Equal(t, 1, r.code)
	assert.Empty(t, r.stdout)
	assert.Regexp(t, fmt.Sprintf(`^corral: kill: port %d is held by pid \d+ \(.+\), which corral did not start; kill it yourself\n$`, port), r.stderr)

	// A server that cannot bind ends before it is ready: wait --ready
	// exits 1 with its last lines (httpd's bind error).
	id = b.start(t, b.server(port), "--name", "late", "--ready-port", p)
	r = b.h.run("wait", "--ready", "--timeout", "2m", "late")
	assert.Equal(t, 1, r.code, "wait --ready: stdout %q stderr %q", r.stdout, r.stderr)
	assert.Empty(t, r.stdout)
	assert.Contains(t, r.stderr, fmt.Sprintf("corral: %s (late) ended before it was ready: exited (1)\n", id))
	assert.Contains(t, r.stderr, "in use")
}

func (b *devBackend) crashed(t *testing.T) {
	port := b.freePort(t)
	// Ready by its port, then, when stdin closes, httpd is killed and the
	// shell exits 4: a crash, not a kill of corral's.
	id := b.start(t, fmt.Sprintf("%s%s & read _; kill $!; echo down; exit 4", b.prep, b.httpd(port)),
		"--name", "crashy", "--stdin", "--ready-port", strconv.Itoa(port))
	b.waitReady(t, "crashy")
	b.h.mustRun("send", "--eof", id)
	ev := b.event(t, id, registry.EventCrashed)
	require.NotNil(t, ev.Status)
	assert.Equal(t, 4, ev.Status.Code)
	assert.Contains(t, ev.Tail, "down")
	in := b.info(t, id)
	assert.Equal(t, registry.StateExited, in.State)
	assert.False(t, in.ReadyAt.IsZero())
}
