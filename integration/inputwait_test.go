//lint:file-ignore SA1019 MCP logging notifications are deprecated only from protocol 2026-07-28, which this server does not offer (see mcp/doc.go); they are how a waiting_input event reaches the agent.

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env/ssh/sshtest"
	"github.com/corralhq/corral/internal/testing/syncbuf"
	"github.com/corralhq/corral/registry"
)

// TestWaitingInputThroughTheCLI: a command that asks for input where
// nobody can answer it is named by corral run in one line on stderr, ps
// shows it waiting (with how), and corral send answers it, after which the
// run ends on its own with the command's exit code. The daemon watches with
// its default quiet spell (1.5 s).
func TestWaitingInputThroughTheCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the corral binary")
	}
	bin := buildCorral(t)
	h := newDaemonHome(t, bin)

	// --stdin from a pipe that stays open and empty: nothing here answers.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "run", "--stdin", "--timeout", "60s", "--", "sh", "-c", `printf 'Name? '; read n; echo "hello $n"; exit 3`)
	cmd.Env = h.env
	stdinW, err := cmd.StdinPipe()
	require.NoError(t, err)
	defer stdinW.Close()
	var out, errOut syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	require.Eventually(t, func() bool { return strings.Contains(errOut.String(), "waits for input") }, 20*time.Second, 50*time.Millisecond,
		"corral run names the wait; stderr %q", errOut.String())
	var said []string
	for _, l := range strings.Split(errOut.String(), "\n") {
		if strings.Contains(l, "waits for input") {
			said = append(said, l)
		}
	}
	require.Len(t, said, 1, "one line says it: %q", errOut.String())
	line := said[0]
	assert.Contains(t, line, `waits for input (pipe) at "Name? "`)
	id := strings.Fields(strings.TrimPrefix(line, "corral: run: "))[0]
	require.True(t, strings.HasPrefix(id, "proc_"), "the line names the process: %q", line)

	var list []registry.Info
	require.NoError(t, json.Unmarshal([]byte(h.mustRun("ps", "--json")), &list))
	var in *registry.Info
	for i := range list {
		if list[i].ID == id {
			in = &list[i]
		}
	}
	require.NotNil(t, in, "ps lists %s", id)
	require.NotNil(t, in.WaitingInput, "ps --json says it waits: %+v", in)
	assert.Equal(t, "pipe", in.WaitingInput.Kind)
	assert.Contains(t, h.mustRun("ps"), "running (foreground), waiting for input (pipe)")

	h.mustRun("send", id, "corral")
	select {
	case err := <-done:
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, 3, ee.ExitCode(), "stdout %q stderr %q", out.String(), errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("corral run did not end after the answer; stdout %q stderr %q", out.String(), errOut.String())
	}
	assert.Contains(t, out.String(), "hello corral")
}

// TestWaitingInputThroughMCP: a foreground terminal call with a pty
// returns as soon as its command asks for a password, still running, with
// the wait and its prompt; a waiting_input notification carries the same;
// process submit answers, and the command ends with the answer.
func TestWaitingInputThroughMCP(t *testing.T) {
	bin := mcpBinary(t)
	notes := newMCPNotes()
	h := newDaemonHome(t, bin)
	cs := mcpConnectEnv(t, bin, h.env, notes)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}))

	var r struct {
		mcpTerminalResult
		WaitingInput *registry.WaitingInput `json:"waiting_input"`
	}
	start := time.Now()
	res := mcpCall(t, cs, "terminal", map[string]any{"pty": true, "timeout": "60s",
		"command": `stty -echo; printf 'Password: '; read pw; stty echo; echo; echo "got ${#pw} chars"; exit 4`}, &r)
	mcpOK(t, res)
	require.Truef(t, r.Yielded && r.State == "running", "the call returns at the prompt, the command running: %+v", r)
	require.NotNil(t, r.WaitingInput, "the result says it waits: %+v", r)
	assert.Equal(t, "password", r.WaitingInput.Kind)
	assert.Equal(t, "Password: ", r.WaitingInput.Prompt)
	assert.Contains(t, mcpText(res), `waiting for input (password) at "Password: "`)
	assert.Less(t, time.Since(start), 30*time.Second, "it did not sit until the timeout")

	ev := notes.await(t, func(ev map[string]any) bool { return ev["type"] == "waiting_input" && ev["id"] == r.ID })
	w, _ := ev["waiting_input"].(map[string]any)
	assert.Equal(t, "Password: ", w["prompt"], "the notification carries the prompt: %v", ev)

	mcpOK(t, mcpCall(t, cs, "process", map[string]any{"action": "submit", "id": r.ID, "data": "s3cret"}, nil))
	var p mcpPollResult
	mcpOK(t, mcpCall(t, cs, "process", map[string]any{"action": "wait", "id": r.ID, "timeout": 20}, &p))
	require.NotNil(t, p.Status, "the command ended after the answer: %+v", p)
	assert.Equal(t, 4, p.Status.Code)
}

// TestWaitingInputOnSandboxes: in a container and on an ssh host, through
// the daemon, a command that asks for a password on its terminal and one
// that reads its stdin pipe are listed waiting for input with their kind
// and prompt; corral send answers each, and the command ends with the
// answer. The sandbox's shell library does the looking (corral_inputwaits).
func TestWaitingInputOnSandboxes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the corral binary, a docker sandbox and sshd")
	}
	sshtest.Require(t)
	dockerCli := requireDocker(t)
	srv := sshtest.Start(t)
	sandbox := fmt.Sprintf("corral-input-test-%08x", rand.Uint32())
	t.Cleanup(func() { removeContainer(dockerCli, sandbox) })

	h := newDaemonHome(t, buildCorral(t))
	h.trustSSH(srv)
	h.startServe()
	for _, b := range []struct{ name, target string }{
		{"docker", "docker-image://" + dockerTestImage + "?network=none&name=" + sandbox},
		{"ssh", srv.Target()},
	} {
		t.Run(b.name, func(t *testing.T) {
			hh := h.with(t)
			for _, c := range []struct {
				mode, command, kind, prompt string
			}{
				{"--pty", `stty -echo; printf 'Secret: '; read v; stty echo; echo "got $v"; exit 4`, "password", "Secret: "},
				{"--label=mode=pipe", `printf 'Name? '; read v; echo "got $v"; exit 4`, "pipe", "Name? "},
			} {
				id := strings.TrimSpace(hh.mustRun("start", "--backend", b.target, "--stdin", c.mode, "--", c.command))
				var in *registry.Info
				require.Eventually(t, func() bool {
					var list []registry.Info
					require.NoError(t, json.Unmarshal([]byte(hh.mustRun("ps", "--json")), &list))
					for i := range list {
						if list[i].ID == id && list[i].WaitingInput != nil {
							in = &list[i]
							return true
						}
					}
					return false
				}, time.Minute, 200*time.Millisecond, "%s %s is listed waiting for input", b.name, c.mode)
				assert.Equal(t, c.kind, in.WaitingInput.Kind)
				assert.Equal(t, c.prompt, in.WaitingInput.Prompt)
				assert.Contains(t, hh.mustRun("ps"), "waiting for input ("+c.kind+")")

				hh.mustRun("send", id, "corral")
				r := hh.run("wait", id)
				assert.Equal(t, 4, r.code, "%+v", r)
				assert.Contains(t, hh.mustRun("logs", id), "got corral")
				hh.mustRun("rm", id)
			}
		})
	}
}
