package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/env/ssh/sshtest"
	"github.com/corralhq/corral/registry"
)

// daemonHome is an isolated corral user environment: its own HOME (state
// directory, local backend state) and XDG_RUNTIME_DIR (socket), so tests
// never meet another test's daemon.
type daemonHome struct {
	t      testing.TB
	bin    string
	home   string
	socket string
	env    []string
	serve  *exec.Cmd // the foreground daemon, when started by serve
}

func newDaemonHome(t testing.TB, bin string) *daemonHome {
	t.Helper()
	// Short paths: a unix socket path must fit in 108 bytes.
	root, err := os.MkdirTemp("", "cd")
	require.NoError(t, err)
	h := &daemonHome{t: t, bin: bin, home: filepath.Join(root, "h")}
	rt := filepath.Join(root, "r")
	for _, d := range []string{h.home, rt} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	h.socket = filepath.Join(rt, "corral", "corral.sock")
	for _, kv := range os.Environ() {
		switch name, _, _ := bytes.Cut([]byte(kv), []byte("=")); string(name) {
		case "HOME", "XDG_RUNTIME_DIR", "XDG_STATE_HOME", "CORRAL_SOCKET", "CORRAL_NO_AUTOSTART":
			continue
		}
		h.env = append(h.env, kv)
	}
	h.env = append(h.env, "HOME="+h.home, "XDG_RUNTIME_DIR="+rt)
	t.Cleanup(func() {
		// Kill what is left, stop the daemon, remove the files.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c := daemon.NewClient(h.socket)
		if _, err := c.Status(ctx); err == nil {
			c.Shutdown(ctx, true)
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) {
				if _, err := c.Status(ctx); errors.Is(err, daemon.ErrNoDaemon) {
					break
				}
				c.CloseIdle()
				time.Sleep(20 * time.Millisecond)
			}
		}
		if h.serve != nil && h.serve.Process != nil {
			h.serve.Process.Kill()
			h.serve.Wait()
		}
		if t.Failed() {
			h.logDaemonLogs()
		}
		os.RemoveAll(root)
	})
	return h
}

// logDaemonLogs logs the end of every daemon log of this home (the
// foreground daemon's serve.log, an auto-started one's daemon.log): a
// failure in CI is explained by what the daemon did, and the home is
// removed right after.
func (h *daemonHome) logDaemonLogs() {
	const tail = 80
	_ = filepath.WalkDir(h.home, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || (d.Name() != "serve.log" && d.Name() != "daemon.log") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > tail {
			lines = lines[len(lines)-tail:]
		}
		h.t.Logf("the last %d lines of %s:\n%s", len(lines), path, strings.Join(lines, "\n"))
		return nil
	})
}

// with is the home as seen from test t: a subtest's failures must end the
// subtest, and FailNow on the parent's t from a subtest's goroutine only
// says "subtest may have called FailNow on a parent test".
func (h *daemonHome) with(t testing.TB) *daemonHome {
	c := *h
	c.t = t
	return &c
}

// run runs corral with this home's environment.
func (h *daemonHome) run(args ...string) cliResult {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.bin, args...)
	cmd.Env = h.env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		require.FailNow(h.t, fmt.Sprintf("corral %q: %v", args, err))
	}
	return cliResult{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errOut.String()}
}

// mustRun runs corral and fails the test unless it exits 0.
func (h *daemonHome) mustRun(args ...string) string {
	h.t.Helper()
	r := h.run(args...)
	if r.code != 0 {
		require.FailNow(h.t, fmt.Sprintf("corral %q: exit %d, stderr %q", args, r.code, r.stderr))
	}
	return r.stdout
}

// startServe runs `corral serve` as a child of the test (so that it can be
// killed with SIGKILL) and waits until it answers. extra flags follow the
// defaults, so they override them ("--log-level", "debug").
func (h *daemonHome) startServe(extra ...string) {
	h.t.Helper()
	cmd := exec.Command(h.bin, append([]string{"serve", "--log-level", "info"}, extra...)...)
	cmd.Env = h.env
	logf, err := os.OpenFile(filepath.Join(h.home, "serve.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	require.NoError(h.t, err)
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(h.t, cmd.Start())
	h.serve = cmd
	c := daemon.NewClient(h.socket)
	defer c.CloseIdle()
	// Recovery of a score of processes on docker and ssh took 40-60 s on
	// a two-core CI machine at a load average of 20-40: give it three.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		st, err := c.Status(context.Background())
		if err == nil && st.PID == cmd.Process.Pid {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(h.home, "serve.log"))
			require.FailNow(h.t, fmt.Sprintf("corral serve did not answer within 3 minutes: %v\n%s", err, log))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// crashServe kills the foreground daemon with SIGKILL.
func (h *daemonHome) crashServe() {
	h.t.Helper()
	h.serve.Process.Signal(syscall.SIGKILL)
	h.serve.Wait()
	h.serve = nil
}

// list returns `corral ps -a --json --ref` filtered by label.
func (h *daemonHome) list(label string) []registry.Info {
	h.t.Helper()
	args := []string{"ps", "-a", "--json", "--ref"}
	if label != "" {
		args = append(args, "--label", label)
	}
	var out []registry.Info
	require.NoError(h.t, json.Unmarshal([]byte(h.mustRun(args...)), &out), "ps --json")
	return out
}

func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		require.Falsef(t, time.Now().After(deadline), "timed out waiting for %s", what)
		time.Sleep(10 * time.Millisecond)
	}
}

// exitRecorded reports whether a process state directory on this machine
// records the exit: env/nohup's exit file (ssh), or the second line that
// env/local's shim server appends to state.json.
func exitRecorded(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, "exit")); err == nil {
		return true
	}
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return false
	}
	_, exit, ok := strings.Cut(string(b), "\n")
	return ok && strings.TrimSpace(exit) != ""
}

// trustSSH lets the daemon of h reach srv the way a user's ssh would:
// default identity file and known_hosts under HOME, and no agent.
func (h *daemonHome) trustSSH(srv *sshtest.Server) {
	h.t.Helper()
	dotSSH := filepath.Join(h.home, ".ssh")
	require.NoError(h.t, os.MkdirAll(dotSSH, 0o700))
	copyFile(h.t, srv.ClientKey, filepath.Join(dotSSH, "id_ed25519"), 0o600)
	copyFile(h.t, srv.KnownHosts, filepath.Join(dotSSH, "known_hosts"), 0o600)
	h.env = slices.DeleteFunc(h.env, func(kv string) bool { return strings.HasPrefix(kv, "SSH_AUTH_SOCK=") })
}
