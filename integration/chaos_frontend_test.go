package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/acpterm"
	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/internal/testing/proctest"
	"github.com/corralhq/corral/registry"
)

// The front-end faults of the suite (issue #28, items 2 and 7): a front
// end killed with SIGKILL, whose session lease the daemon holds, and the
// daemon's own environment, which must not reach a caller's commands.

// frontEndGone bounds the time from a front end's SIGKILL to the end of
// every tree its session did not persist: the promise is "a few seconds".
const frontEndGone = 5 * time.Second

// frontEndCall bounds one front-end call of these tests (a start, a short
// foreground run): generous for a loaded two-core machine, far below a hang.
const frontEndCall = 20 * time.Second

// treeCommand is a command whose tree has a child and a grandchild besides
// its shell, all `sleep MARKER`: killing the leader alone leaves two.
func treeCommand(marker string) string {
	return "sh -c 'sleep " + marker + " & sleep " + marker + "; :' & sleep " + marker + "; wait"
}

// waitGoneWithin waits for every `sleep MARKER` to end and fails the test
// when that takes longer than bound; it returns how long it took.
func waitGoneWithin(t *testing.T, what string, bound time.Duration, since time.Time, marker string) time.Duration {
	t.Helper()
	deadline := since.Add(bound + 10*time.Second) // past the bound: to measure, not to wait for ever
	for len(proctest.Sleepers(marker)) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(since)
	left := proctest.Sleepers(marker)
	t.Logf("chaos: %s: %s (bound %s; %d left)", what, took.Round(time.Millisecond), bound, len(left))
	if len(left) > 0 || took > bound {
		assert.Fail(t, fmt.Sprintf("chaos: %s: still %d processes after %s, over its bound of %s", what, len(left), took.Round(time.Millisecond), bound))
	}
	return took
}

// frontEndNoLeftovers stops h's daemon without killing anything, then is
// chaosNoLeftovers for the processes of this test's corral user only
// (homeScope): the machine may run other corral tests at the same time,
// whose processes are theirs to clean up.
func frontEndNoLeftovers(t *testing.T, h *daemonHome, since time.Time, bound time.Duration, markers ...string) {
	t.Helper()
	h.mustRun("shutdown")
	chaosNoLeftoversWhere(t, since, bound, homeScope(h), markers...)
}

// startMCPCmd starts `corral mcp` with environ in dir (stdio) and connects a
// client; the *exec.Cmd is returned so the test can SIGKILL it.
func startMCPCmd(t *testing.T, bin string, environ []string, dir string, extra ...string) (*mcp.ClientSession, *exec.Cmd) {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "corral-chaos", Version: "1"}, nil)
	cmd := exec.Command(bin, append([]string{"mcp", "--log-level", "warn"}, extra...)...)
	cmd.Env, cmd.Dir = environ, dir
	cmd.Stderr = os.Stderr
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: time.Second}, nil)
	require.NoError(t, err, "connect to corral mcp")
	t.Cleanup(func() { _ = cs.Close() })
	return cs, cmd
}

// baselineRunLease is the same run's baseline: a `corral run` client
// killed with SIGKILL, whose connection has been a lease all along. It
// returns how long its tree took to go.
func baselineRunLease(t *testing.T, h *daemonHome) time.Duration {
	t.Helper()
	m := proctest.Marker()
	proctest.KillOnCleanup(t, m)
	run := exec.Command(h.bin, "run", "--", "sh", "-c", treeCommand(m))
	run.Env = h.env
	require.NoError(t, run.Start())
	proctest.WaitRunning(t, m, 3)
	require.NoError(t, run.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	_ = run.Wait()
	return waitGoneWithin(t, "baseline: corral run killed -9, its tree gone", frontEndGone, killed, m)
}

// TestChaosFrontEndMCPKilled: a `corral mcp` (stdio and HTTP) killed with
// SIGKILL while its session has background trees running. The daemon holds
// each session's lease: within a few seconds every tree the session did not
// persist is gone, the persisted one still runs, and nothing of corral is
// left once the test ends it.
func TestChaosFrontEndMCPKilled(t *testing.T) {
	bin := mcpBinary(t)
	since := time.Now()
	h := newDaemonHome(t, bin)
	h.mustRun("ps") // starts this home's daemon
	baseline := baselineRunLease(t, h)

	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			dropped, yielded, kept := proctest.Marker(), proctest.Marker(), proctest.Marker()
			for _, m := range []string{dropped, yielded, kept} {
				proctest.KillOnCleanup(t, m)
			}
			var cs *mcp.ClientSession
			var cmd *exec.Cmd
			if transport == "stdio" {
				cs, cmd = startMCPCmd(t, bin, h.env, "")
			} else {
				cs, cmd = startMCPHTTP(t, bin, h.env)
			}
			var r mcpTerminalResult
			chaosWithin(t, "mcp: background start", frontEndCall, func() {
				mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{"command": treeCommand(dropped), "background": true}, &r))
			})
			droppedID := r.ID
			mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{"command": treeCommand(yielded), "yield_after": 0.2}, &r))
			require.True(t, r.Yielded, "the yielded run ended: %+v", r)
			mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{"command": treeCommand(kept), "background": true, "persist": true}, &r))
			keptID := r.ID
			for _, m := range []string{dropped, yielded, kept} {
				proctest.WaitRunning(t, m, 3)
			}

			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			killed := time.Now()
			took := waitGoneWithin(t, "mcp ("+transport+") killed -9, its session's trees gone", frontEndGone, killed, dropped)
			waitGoneWithin(t, "mcp ("+transport+") killed -9, its yielded run's tree gone", frontEndGone, killed, yielded)
			t.Logf("figure: corral mcp (%s) killed -9 → its trees gone in %s; baseline corral run killed -9 → %s", transport, took.Round(time.Millisecond), baseline.Round(time.Millisecond))

			// Tracked, and said so: ps lists the dropped process as killed.
			waitCond(t, "the dropped process listed as killed", func() bool {
				for _, in := range h.list("") {
					if in.ID == droppedID {
						return in.State == registry.StateKilled && !in.TreeRunning
					}
				}
				return false
			})
			// The session is over: a start in it is refused, in one short
			// sentence that says what to do.
			c := daemon.NewClient(h.socket)
			defer c.CloseIdle()
			gone, err := c.Get(context.Background(), droppedID)
			require.NoError(t, err)
			require.NotEmpty(t, gone.Session)
			assert.Contains(t, gone.Reason, "dropped", "the killed process says why")
			chaosWithin(t, "a start in the dropped session", frontEndCall, func() {
				_, err = c.Start(context.Background(), registry.StartOptions{Command: "true", Session: gone.Session})
			})
			require.ErrorIs(t, err, registry.ErrInvalidOptions)
			chaosShortError(t, err.Error())
			assert.Contains(t, err.Error(), "open a session")
			assert.Len(t, proctest.Sleepers(kept), 3, "the persisted tree must outlive its session")
			for _, in := range h.list("") {
				if in.ID == keptID {
					assert.Equal(t, registry.StateRunning, in.State, "the persisted process")
				}
			}
			chaosWithin(t, "corral kill of the persisted process", frontEndCall, func() { h.mustRun("kill", keptID) })
			proctest.RequireGone(t, kept)
		})
	}
	frontEndNoLeftovers(t, h, since, 10*time.Second)
}

// startMCPHTTP starts `corral mcp --http 127.0.0.1:0` with environ and
// connects a client over streamable HTTP.
func startMCPHTTP(t *testing.T, bin string, environ []string) (*mcp.ClientSession, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(bin, "mcp", "--log-level", "warn", "--http", "127.0.0.1:0")
	cmd.Env = environ
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	lines := bufio.NewReader(stderr)
	line, err := lines.ReadString('\n')
	require.NoError(t, err, "read the serving line")
	go func() { _, _ = io.Copy(io.Discard, lines) }()
	m := regexp.MustCompile(`serving (http://127\.0\.0\.1:\d+/mcp) with bearer token ([0-9a-f]{64})`).FindStringSubmatch(line)
	require.NotNil(t, m, "serving line %q", line)
	hc := &http.Client{Transport: mcpBearer{token: m[2]}}
	client := mcp.NewClient(&mcp.Implementation{Name: "corral-chaos", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: m[1], HTTPClient: hc}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs, cmd
}

// TestChaosFrontEndACPKilled: a `corral acp` proxy killed with SIGKILL
// while the agent's terminals run: within a few seconds their trees are
// gone and listed as killed.
func TestChaosFrontEndACPKilled(t *testing.T) {
	bin := buildCorral(t)
	since := time.Now()
	h := newDaemonHome(t, bin)
	h.mustRun("ps")
	baseline := baselineRunLease(t, h)

	m := proctest.Marker()
	proctest.KillOnCleanup(t, m)
	e := startACPEditorEnv(t, bin, h.env, "")
	var res []acpStepResult
	chaosWithin(t, "acp: terminal/create", frontEndCall, func() {
		res = e.run(acpStep{Op: "create", As: "t", Command: treeCommand(m)})
	})
	require.Nil(t, res[0].Error)
	proctest.WaitRunning(t, m, 3)

	require.NoError(t, e.cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	took := waitGoneWithin(t, "acp killed -9, its terminals' trees gone", frontEndGone, killed, m)
	t.Logf("figure: corral acp killed -9 → its terminals gone in %s; baseline corral run killed -9 → %s", took.Round(time.Millisecond), baseline.Round(time.Millisecond))
	select {
	case <-e.exited:
	case <-time.After(frontEndCall):
		require.FailNow(t, "corral acp did not die of SIGKILL")
	}
	waitCond(t, "the terminal listed as killed", func() bool {
		l := h.list(acpterm.SessionLabel + "=" + string(e.session))
		return len(l) == 1 && l[0].State == registry.StateKilled && !l[0].TreeRunning
	})
	frontEndNoLeftovers(t, h, since, 10*time.Second, m)
}

// startACPEditorEnv is startACPEditor with corral's environment environ
// and working directory dir (the agent gets them too, plus its own
// variable).
func startACPEditorEnv(t *testing.T, bin string, environ []string, dir string) *acpEditor {
	t.Helper()
	e := newACPEditor(t)
	agentArgv, _ := acpAgentCommand(t, "")
	e.cmd = exec.Command(bin, append([]string{"acp", "--"}, agentArgv...)...)
	e.cmd.Env, e.cmd.Dir = append(slices.Clone(environ), acpAgentEnv+"=1"), dir
	e.start()
	return e
}

// TestChaosFrontEndEnv: a daemon auto-started from a shell that had
// DAEMONONLY_X set must not pass it to the commands of later callers that
// do not have it, whichever the front end (run, start, MCP, ACP); a
// caller's own VIRTUAL_ENV and working directory reach its command, and
// its credentials do not.
func TestChaosFrontEndEnv(t *testing.T) {
	bin := mcpBinary(t)
	since := time.Now()
	h := newDaemonHome(t, bin)
	daemonShell := append(slices.Clone(h.env), "DAEMONONLY_X=1")
	auto := exec.Command(bin, "ps")
	auto.Env = daemonShell
	out, err := auto.CombinedOutput()
	require.NoError(t, err, "auto-start the daemon: %s", out)
	require.Contains(t, string(out), "started the corral daemon", "this call must be the one that starts the daemon")

	venv := filepath.Join(t.TempDir(), "venv-"+proctest.Marker())
	wd := t.TempDir()
	caller := append(slices.Clone(h.env), "VIRTUAL_ENV="+venv, "CHAOS_CALLER_TOKEN=s3cret")
	const probe = `printf 'X=%s V=%s T=%s D=%s\n' "${DAEMONONLY_X-unset}" "${VIRTUAL_ENV-unset}" "${CHAOS_CALLER_TOKEN-unset}" "$PWD"`
	want := "X=unset V=" + venv + " T=unset D=" + wd + "\n"
	runIn := func(args ...string) cliResult {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env, cmd.Dir = caller, wd
		var so, se strings.Builder
		cmd.Stdout, cmd.Stderr = &so, &se
		err := cmd.Run()
		var ee *exec.ExitError
		require.Truef(t, err == nil || errors.As(err, &ee), "corral %q: %v", args, err)
		return cliResult{code: cmd.ProcessState.ExitCode(), stdout: so.String(), stderr: se.String()}
	}

	t.Run("run", func(t *testing.T) {
		var r cliResult
		chaosWithin(t, "corral run", frontEndCall, func() { r = runIn("run", "--", "sh", "-c", probe) })
		require.Equal(t, 0, r.code, r.stderr)
		assert.Equal(t, want, r.stdout)
	})
	t.Run("start", func(t *testing.T) {
		var r cliResult
		chaosWithin(t, "corral start", frontEndCall, func() { r = runIn("start", "--", "sh", "-c", probe) })
		require.Equal(t, 0, r.code, r.stderr)
		id := strings.TrimSpace(r.stdout)
		h.mustRun("wait", id)
		assert.Equal(t, want, h.mustRun("logs", id))
		// A relative --dir is the caller's, not the daemon's.
		require.NoError(t, os.Mkdir(filepath.Join(wd, "sub"), 0o700))
		r = runIn("start", "--dir", "sub", "--", "pwd")
		require.Equal(t, 0, r.code, r.stderr)
		id = strings.TrimSpace(r.stdout)
		h.mustRun("wait", id)
		assert.Equal(t, filepath.Join(wd, "sub")+"\n", h.mustRun("logs", id))
	})
	t.Run("mcp", func(t *testing.T) {
		cs, _ := startMCPCmd(t, bin, caller, wd)
		var r mcpTerminalResult
		chaosWithin(t, "mcp terminal", frontEndCall, func() {
			mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{"command": probe}, &r))
		})
		assert.Equal(t, want, r.Output)
		mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{"command": probe, "background": true}, &r))
		h.mustRun("wait", r.ID)
		assert.Equal(t, want, h.mustRun("logs", r.ID), "a background command")
	})
	t.Run("acp", func(t *testing.T) {
		e := startACPEditorEnv(t, bin, caller, wd)
		res := e.run(acpStep{Op: "create", As: "t", Command: probe}, acpStep{Op: "wait", T: "t"}, acpStep{Op: "output", T: "t"})
		require.Nil(t, res[0].Error)
		require.NotNil(t, res[2].Output)
		assert.Equal(t, want, res[2].Output.Output)
	})
	frontEndNoLeftovers(t, h, since, 10*time.Second)
}

// TestChaosFrontEndDaemonRestart: the daemon is killed with SIGKILL under
// a live `corral mcp` and started again. The server's session lease comes
// back by itself (its processes are not killed by the restart), and is
// still a lease: a SIGKILL of the server then ends the session's trees as
// before.
func TestChaosFrontEndDaemonRestart(t *testing.T) {
	bin := mcpBinary(t)
	since := time.Now()
	h := newDaemonHome(t, bin)
	h.startServe()
	m := proctest.Marker()
	proctest.KillOnCleanup(t, m)
	cs, cmd := startMCPCmd(t, bin, h.env, "")
	var r mcpTerminalResult
	mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{"command": treeCommand(m), "background": true}, &r))
	proctest.WaitRunning(t, m, 3)
	// The daemon crashes only once its state file holds the process (a
	// start's own durability is another fault's).
	stateFile := filepath.Join(h.home, ".local", "state", "corral", "state.json")
	waitCond(t, "the process in the state file", func() bool {
		b, err := os.ReadFile(stateFile)
		return err == nil && strings.Contains(string(b), r.ID)
	})

	h.crashServe()
	h.startServe()
	// The server opens its lease again by itself, within about a second
	// of the daemon's answer; until then the new daemon waits for it.
	c := daemon.NewClient(h.socket)
	defer c.CloseIdle()
	chaosWithin(t, "mcp: the session lease held again after the daemon's restart", frontEndCall, func() {
		waitCond(t, "the session held again", func() bool {
			list, err := c.Sessions(context.Background())
			return err == nil && len(list) == 1 && list[0].Holders == 1 && list[0].ReclaimBy.IsZero()
		})
	})
	var again mcpTerminalResult
	mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{"command": "true", "background": true}, &again))
	require.Len(t, proctest.Sleepers(m), 3, "the restart killed the session's tree")

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	waitGoneWithin(t, "mcp killed -9 after a daemon restart, its session's trees gone", frontEndGone, killed, m)
	waitCond(t, "the process listed as killed", func() bool {
		for _, in := range h.list("") {
			if in.ID == r.ID {
				return in.State == registry.StateKilled && !in.TreeRunning
			}
		}
		return false
	})
	frontEndNoLeftovers(t, h, since, 10*time.Second, m)
}
