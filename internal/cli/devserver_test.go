package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/internal/backends"
	"github.com/corralhq/corral/registry"
)

// startTestDaemon runs a corral daemon in this process on a private socket
// and state directory, which the in-process CLI finds through
// CORRAL_SOCKET and XDG_STATE_HOME (the local backend keeps its process
// directories there too). At the end it kills every tree and stops.
func startTestDaemon(t *testing.T) *daemon.Client {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("uses the Linux local backend's socket view")
	}
	// A short path: a unix socket's path is limited to ~108 bytes.
	dir, err := os.MkdirTemp("", "corral-cli")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	t.Setenv("CORRAL_SOCKET", filepath.Join(dir, "run", "s.sock"))
	t.Setenv("XDG_STATE_HOME", filepath.Join(dir, "state"))
	paths, err := daemon.DefaultPaths()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- daemon.Run(ctx, daemon.Config{Paths: paths, Open: backends.Options{}.Open, DefaultGrace: time.Second,
			Logger: slog.New(slog.DiscardHandler), Ready: func(daemon.Status) { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		require.FailNow(t, fmt.Sprintf("daemon: %v", err))
	}
	c := daemon.NewClient(paths.Socket)
	t.Cleanup(func() {
		_, err := c.KillAll(context.Background(), registry.KillAllOptions{Grace: time.Second})
		assert.NoError(t, err, "kill all")
		c.CloseIdle()
		cancel()
		require.NoError(t, <-done)
	})
	return c
}

// freePort returns a TCP port nothing listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

// httpServer is the command line of a small real HTTP server on port:
// busybox httpd when it is installed, else python3's.
func httpServer(t *testing.T, port int) string {
	t.Helper()
	if bb, err := exec.LookPath("busybox"); err == nil {
		root := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(root, "index.html"), []byte("hi\n"), 0o600))
		return fmt.Sprintf("exec %s httpd -f -p 127.0.0.1:%d -h %s", bb, port, root)
	}
	if _, err := exec.LookPath("python3"); err == nil {
		return fmt.Sprintf("exec python3 -m http.server --bind 127.0.0.1 %d", port)
	}
	t.Skip("needs busybox or python3 for an HTTP server")
	return ""
}

func mustCorral(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := corral(t, "", args...)
	require.Equal(t, 0, code, "corral %v: stdout %q stderr %q", args, out, errOut)
	return out
}

// TestDevServerCLI drives a named dev server through the CLI and a real
// daemon: readiness on its port, reuse, refusal, ps and ports columns,
// kill --port. It takes a few seconds: the first start opens the local
// backend, and every ports or kill --port call reads the sockets of every
// process of the machine from /proc.
func TestDevServerCLI(t *testing.T) {
	c := startTestDaemon(t)
	port := freePort(t)
	server := httpServer(t, port)

	id := strings.TrimSpace(mustCorral(t, "start", "--name", "web", "--ready-port", fmt.Sprint(port), "--ttl", "1h", "--", server))
	require.True(t, registry.ValidID(id), "start printed %q", id)
	code, out, errOut := corral(t, "", "wait", "--ready", "--timeout", "30s", "web")
	require.Equal(t, 0, code, "wait --ready: stdout %q stderr %q", out, errOut)
	assert.Empty(t, out+errOut)
	in, err := c.Get(context.Background(), id)
	require.NoError(t, err)
	assert.False(t, in.ReadyAt.IsZero(), "ready_at")

	t.Run("reuse", func(t *testing.T) {
		code, out, errOut := corral(t, "", "start", "--name", "web", "--ready-port", fmt.Sprint(port), "--ttl", "1h", "--", server)
		require.Equal(t, 0, code, "stderr %q", errOut)
		assert.Equal(t, id+"\n", out, "stdout is the running process's ID alone")
		assert.Equal(t, fmt.Sprintf("corral: reused %s (web): already running with the same command\n", id), errOut)
	})
	t.Run("name in use", func(t *testing.T) {
		code, out, errOut := corral(t, "", "start", "--name", "web", "--", "sleep 60")
		assert.Equal(t, exitCorralError, code)
		assert.Empty(t, out)
		assert.Contains(t, errOut, "name web is held by "+id)
		assert.Contains(t, errOut, "--replace kills it, then starts this command")
	})
	t.Run("ps", func(t *testing.T) {
		out := mustCorral(t, "ps")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 2, out)
		// CPU and MEM show once the sampler measured the server, which
		// may or may not have happened yet.
		assert.Regexp(t, `^ID\s+NAME\s+BACKEND\s+STATE\s+AGE\s+LEFT\s+PID\s+(CPU\s+MEM\s+)?PORTS\s+COMMAND$`, lines[0])
		assert.Regexp(t, fmt.Sprintf(`^%s\s+web\s+local\s+running, ready\s+\d+s\s+(59m\d+s|1h0m)\s+\d+\s+(\S+\s+\S+\s+)?%d\s+exec `, id, port), lines[1])

		var list []registry.Info
		require.NoError(t, json.Unmarshal([]byte(mustCorral(t, "ps", "--json")), &list))
		require.Len(t, list, 1)
		assert.Equal(t, []int{port}, list[0].Ports)
		assert.Equal(t, "web", list[0].Name)
	})
	t.Run("ports", func(t *testing.T) {
		out := mustCorral(t, "ports")
		assert.Regexp(t, `(?m)^PORT\s+ADDR\s+PID\s+OWNER\s+COMMAND$`, out)
		assert.Regexp(t, fmt.Sprintf(`(?m)^%d\s+127\.0\.0\.1\s+\d+\s+%s \(web\)\s+\S`, port, id), out)

		var list []registry.PortInfo
		require.NoError(t, json.Unmarshal([]byte(mustCorral(t, "ports", "--json")), &list))
		var ours []registry.PortInfo
		for _, p := range list {
			if p.Port == port {
				ours = append(ours, p)
			}
		}
		require.Len(t, ours, 1, "%+v", list)
		assert.Equal(t, id, ours[0].ID)
		assert.Equal(t, "web", ours[0].Name)
		assert.Equal(t, "local", ours[0].Backend)
	})
	t.Run("ready url", func(t *testing.T) {
		// Through the daemon, which must pass the environment's URL
		// checker on.
		port := freePort(t)
		mustCorral(t, "start", "--name", "api", "--ready-url", fmt.Sprintf("http://127.0.0.1:%d/", port), "--", httpServer(t, port))
		code, out, errOut := corral(t, "", "wait", "--ready", "--timeout", "30s", "api")
		require.Equal(t, 0, code, "wait --ready: stdout %q stderr %q", out, errOut)
		mustCorral(t, "kill", "api")
	})
	t.Run("kill --port", func(t *testing.T) {
		out := mustCorral(t, "kill", "--port", fmt.Sprint(port))
		assert.Contains(t, out, id+" killed: SIGTERM")
		in, err := c.Get(context.Background(), id)
		require.NoError(t, err)
		assert.Equal(t, registry.StateKilled, in.State)
		code, _, errOut := corral(t, "", "kill", "--port", fmt.Sprint(port))
		assert.Equal(t, exitFailure, code)
		assert.Equal(t, fmt.Sprintf("corral: kill: nothing listens on port %d\n", port), errOut)
	})
}

// TestKillPortForeignHolder: a port this test holds (a process corral did
// not start) is listed without an owner, kill --port refuses it naming
// the holder, and it does not make a corral process that waits for that
// port ready.
func TestKillPortForeignHolder(t *testing.T) {
	startTestDaemon(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port

	out := mustCorral(t, "ports")
	assert.Regexp(t, fmt.Sprintf(`(?m)^%d\s+127\.0\.0\.1\s+%d\s+-\s+\S`, port, os.Getpid()), out)

	code, out, errOut := corral(t, "", "kill", "--port", fmt.Sprint(port))
	assert.Equal(t, exitFailure, code)
	assert.Empty(t, out)
	assert.Regexp(t, fmt.Sprintf(`^corral: kill: port %d is held by pid %d \(.+\), which corral did not start; kill it yourself\n$`, port, os.Getpid()), errOut)

	id := strings.TrimSpace(mustCorral(t, "start", "--ready-port", fmt.Sprint(port), "--", "sleep 60"))
	code, _, errOut = corral(t, "", "wait", "--ready", "--timeout", "300ms", id)
	assert.Equal(t, exitTimeout, code)
	assert.Equal(t, fmt.Sprintf("corral: wait: %s not ready after 300ms (running)\n", id), errOut)
}

// TestWaitReadyEndedFirst: a server that dies before it is ready makes
// wait --ready exit 1 with its last output lines on stderr.
func TestWaitReadyEndedFirst(t *testing.T) {
	startTestDaemon(t)
	id := strings.TrimSpace(mustCorral(t, "start", "--name", "api", "--ready-pattern", "^listening", "--",
		"echo starting; echo 'error: address already in use' >&2; exit 3"))
	code, out, errOut := corral(t, "", "wait", "--ready", "api")
	assert.Equal(t, exitFailure, code)
	assert.Empty(t, out)
	assert.Equal(t, fmt.Sprintf("corral: %s (api) ended before it was ready: exited (3)\nstarting\nerror: address already in use\n", id), errOut)

	// A process without readiness conditions is a usage error.
	plain := strings.TrimSpace(mustCorral(t, "start", "--", "sleep 60"))
	code, _, errOut = corral(t, "", "wait", "--ready", "--timeout", "1s", plain)
	assert.Equal(t, exitUsage, code, errOut)
}

// TestWritePSColumns: NAME, LEFT and PORTS are columns only when some
// process has one; LEFT counts down a running tree's TTL.
func TestWritePSColumns(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	plain := registry.Info{ID: "proc_0123456789ab", Backend: "local", State: registry.StateRunning, PID: 42,
		CreatedAt: now.Add(-5 * time.Second), Command: "sleep 60"}
	var b strings.Builder
	writePS(&b, []registry.Info{plain}, now)
	assert.Equal(t, "ID                 BACKEND  STATE    AGE  PID  COMMAND\n"+
		"proc_0123456789ab  local    running  5s   42   sleep 60\n", b.String())

	web := registry.Info{ID: "proc_ba9876543210", Name: "web", Backend: "local", State: registry.StateRunning, PID: 7,
		CreatedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour + 59*time.Minute + 30*time.Second),
		Ready: &registry.ReadyOptions{Port: 3000}, ReadyAt: now, Ports: []int{3000, 3001, 3002, 9229}, Command: "npm run dev"}
	b.Reset()
	writePS(&b, []registry.Info{plain, web}, now)
	assert.Equal(t, "ID                 NAME  BACKEND  STATE           AGE  LEFT   PID  PORTS              COMMAND\n"+
		"proc_0123456789ab  -     local    running         5s   -      42   -                  sleep 60\n"+
		"proc_ba9876543210  web   local    running, ready  1m   1h59m  7    3000,3001,3002,+1  npm run dev\n", b.String())

	// The texts of each column are registry's (present.go), tested there.
}
