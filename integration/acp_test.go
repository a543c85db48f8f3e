package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	acp "github.com/coder/acp-go-sdk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/acpterm"
	"github.com/corralhq/corral/internal/testing/acptest"
	"github.com/corralhq/corral/internal/testing/proctest"
)

// acpEditor plays an editor, written with the SDK, that started
// `corral acp [flags] -- <the scripted agent>` as its agent.
type acpEditor struct {
	t       *testing.T
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	conn    *acp.ClientSideConnection
	client  *acptest.Editor
	sent    *acptest.Tape // what the editor wrote to corral
	got     *acptest.Tape // what corral wrote to the editor
	tapeDir string        // the agent's own tapes
	stderr  *acptest.Tape
	session acp.SessionId
	exited  chan struct{}
	waitErr error
}

// acpAgentCommand is the scripted agent's command line and environment.
func acpAgentCommand(t testing.TB, tapeDir string) ([]string, []string) {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	environ := append(os.Environ(), acpAgentEnv+"=1")
	if tapeDir != "" {
		environ = append(environ, acpTapeEnv+"="+tapeDir)
	}
	return []string{self}, environ
}

// startACPEditor starts corral acp with flags in front of the scripted
// agent, connects the editor, initializes and opens a session.
func startACPEditor(t *testing.T, bin string, flags ...string) *acpEditor {
	t.Helper()
	e := newACPEditor(t)
	e.tapeDir = t.TempDir()
	agentArgv, environ := acpAgentCommand(t, e.tapeDir)
	args := append(append([]string{"acp"}, flags...), "--")
	e.cmd = exec.Command(bin, append(args, agentArgv...)...)
	e.cmd.Env = environ
	e.start()
	return e
}

func newACPEditor(t *testing.T) *acpEditor {
	return &acpEditor{t: t, sent: &acptest.Tape{}, got: &acptest.Tape{}, stderr: &acptest.Tape{},
		client: &acptest.Editor{T: t}, exited: make(chan struct{})}
}

// start runs e.cmd (corral acp), connects the editor to it, initializes
// and opens a session; corral acp must exit within a minute of the
// editor leaving at the test's end.
func (e *acpEditor) start() {
	t := e.t
	t.Helper()
	e.cmd.Stderr = e.stderr
	var err error
	e.stdin, err = e.cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := e.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, e.cmd.Start())
	go func() {
		e.waitErr = e.cmd.Wait()
		close(e.exited)
	}()
	t.Cleanup(func() {
		_ = e.stdin.Close()
		select {
		case <-e.exited:
		case <-time.After(time.Minute):
			_ = e.cmd.Process.Kill()
			<-e.exited
			assert.Fail(t, fmt.Sprintf("corral acp did not exit within a minute of its editor leaving; stderr:\n%s", e.stderr.String()))
		}
	})
	e.conn = acp.NewClientSideConnection(e.client, io.MultiWriter(e.sent, e.stdin), io.TeeReader(stdout, e.got))
	e.conn.SetLogger(slog.New(slog.DiscardHandler))

	ctx := acpCtx(t)
	_, err = e.conn.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber,
		ClientCapabilities: acp.ClientCapabilities{Fs: acp.FileSystemCapabilities{ReadTextFile: true}},
		ClientInfo:         &acp.Implementation{Name: "corral-it-editor", Version: "1"}})
	require.NoError(t, err, "initialize; corral stderr:\n%s", e.stderr.String())
	sess, err := e.conn.NewSession(ctx, acp.NewSessionRequest{Cwd: "/", McpServers: []acp.McpServer{}})
	require.NoError(t, err)
	e.session = sess.SessionId
}

func acpCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// run has the agent make the steps' terminal calls and returns what each
// returned.
func (e *acpEditor) run(steps ...acpStep) []acpStepResult {
	e.t.Helper()
	script, err := json.Marshal(steps)
	require.NoError(e.t, err)
	before := len(e.client.Updates())
	_, err = e.conn.Prompt(acpCtx(e.t), acp.PromptRequest{SessionId: e.session, Prompt: []acp.ContentBlock{acp.TextBlock(string(script))}})
	require.NoError(e.t, err, "prompt; corral stderr:\n%s", e.stderr.String())
	updates := e.client.Updates()
	require.Len(e.t, updates, before+1, "one message with the results")
	u := updates[before].Update.AgentMessageChunk
	require.NotNil(e.t, u)
	var results []acpStepResult
	require.NoError(e.t, json.Unmarshal([]byte(u.Content.Text.Text), &results))
	require.Len(e.t, results, len(steps))
	return results
}

// requireRelayedUnchanged checks the byte-for-byte relay: every line the
// editor sent reached the agent as is (but initialize, which gained the
// terminal capability), and every line the agent sent reached the editor
// as is (but its terminal requests, which corral answered).
func (e *acpEditor) requireRelayedUnchanged() {
	t := e.t
	agentIn, err := os.ReadFile(filepath.Join(e.tapeDir, "agent-in"))
	require.NoError(t, err)
	agentOut, err := os.ReadFile(filepath.Join(e.tapeDir, "agent-out"))
	require.NoError(t, err)
	type wire struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	parse := func(l string) wire {
		var w wire
		require.NoError(t, json.Unmarshal([]byte(l), &w), "line %q", l)
		return w
	}
	answered := map[string]bool{}
	var agentRelayed []string
	for _, l := range acptest.Lines(agentOut) {
		if w := parse(l); strings.HasPrefix(w.Method, "terminal/") || w.Method == "$/cancel_request" {
			answered[string(w.ID)] = w.ID != nil
			continue
		}
		agentRelayed = append(agentRelayed, l)
	}
	require.NotEmpty(t, answered, "the agent made terminal calls")
	var editorSent []string
	for _, l := range e.sent.Lines() {
		if parse(l).Method != "initialize" {
			editorSent = append(editorSent, l)
		}
	}
	var agentGot []string
	for _, l := range acptest.Lines(agentIn) {
		w := parse(l)
		if w.Method == "initialize" || (w.Method == "" && answered[string(w.ID)]) {
			continue
		}
		agentGot = append(agentGot, l)
	}
	assert.Equal(t, editorSent, agentGot, "editor → agent, byte for byte")
	assert.Equal(t, agentRelayed, e.got.Lines(), "agent → editor, byte for byte")
}

// acpBackends are the backends the ACP tests run on: corral acp flags and
// the directory that exists there.
func acpBackends(t *testing.T) map[string][]string {
	return map[string][]string{"local": nil, "docker": {"--backend", "docker://" + startUserContainer(t, requireDocker(t))}}
}

func TestACPProxyServesEveryTerminalMethod(t *testing.T) {
	bin := buildCorral(t)
	for name, flags := range acpBackends(t) {
		t.Run(name, func(t *testing.T) {
			e := startACPEditor(t, bin, flags...)
			limit := 7
			neg := -3
			res := e.run(
				acpStep{Op: "create", As: "args", Command: "printf", Args: []string{"%s|", "a b", "'q'", "$HOME", "", "x;y"}},
				acpStep{Op: "wait", T: "args"},
				acpStep{Op: "output", T: "args"},
				// "é" is 2 bytes: a limit of 7 cuts the fourth from the end in
				// half, so 3 characters (6 bytes) remain.
				acpStep{Op: "create", As: "utf8", Command: "printf", Args: []string{"%s", "ééééé"}, Limit: &limit},
				acpStep{Op: "wait", T: "utf8"},
				acpStep{Op: "output", T: "utf8"},
				acpStep{Op: "create", As: "sig", Command: "sh", Args: []string{"-c", "kill -TERM $$"}, Env: map[string]string{"X": "1"}},
				acpStep{Op: "wait", T: "sig"},
				acpStep{Op: "output", T: "sig"},
				acpStep{Op: "create", Command: "true", Cwd: "/nonexistent-corral-dir"},
				acpStep{Op: "create", Command: "true", Limit: &neg},
				acpStep{Op: "output", ID: "proc_0123456789ab"},
				acpStep{Op: "kill", T: "args"},
				acpStep{Op: "release", T: "args"},
				acpStep{Op: "output", T: "args"},
			)
			for i, r := range res[:9] {
				require.Nil(t, r.Error, "step %d: %+v", i, r.Error)
			}
			require.NotNil(t, res[1].Exit.ExitCode)
			assert.Equal(t, 0, *res[1].Exit.ExitCode)
			assert.Equal(t, "a b|'q'|$HOME||x;y|", res[2].Output.Output, "args reach the program unparsed")
			assert.False(t, res[2].Output.Truncated)
			assert.Equal(t, "ééé", res[5].Output.Output)
			assert.True(t, res[5].Output.Truncated)
			require.NotNil(t, res[7].Exit.Signal)
			assert.Equal(t, "SIGTERM", *res[7].Exit.Signal)
			assert.Nil(t, res[7].Exit.ExitCode)
			assert.Equal(t, "SIGTERM", *res[8].Output.ExitStatus.Signal)

			require.NotNil(t, res[9].Error, "a cwd that does not exist")
			assert.Equal(t, acpterm.CodeInvalidParams, res[9].Error.Code, res[9].Error.Message)
			assert.Contains(t, res[9].Error.Message, "/nonexistent-corral-dir")
			require.NotNil(t, res[10].Error, "a negative limit")
			assert.Contains(t, res[10].Error.Message, "outputByteLimit -3 is negative")
			require.NotNil(t, res[11].Error, "an unknown terminal")
			assert.Equal(t, acpterm.CodeResourceNotFound, res[11].Error.Code)
			assert.Contains(t, res[11].Error.Message, `unknown terminal "proc_0123456789ab"`)
			require.Nil(t, res[12].Error)
			require.Nil(t, res[13].Error)
			require.NotNil(t, res[14].Error, "a released terminal is forgotten")
			assert.Contains(t, res[14].Error.Message, "unknown terminal")

			// Terminals are corral processes labelled with the session: a
			// person sees them with corral ps, the released one is gone.
			ps := runCorral(t, bin, nil, "ps", "-a", "--json", "--label", acpterm.SessionLabel+"="+string(e.session))
			require.Equal(t, 0, ps.code, ps.stderr)
			var listed []map[string]any
			require.NoError(t, json.Unmarshal([]byte(ps.stdout), &listed))
			ids := map[string]bool{}
			for _, in := range listed {
				ids[in["id"].(string)] = true
			}
			assert.Equal(t, map[string]bool{res[3].ID: true, res[6].ID: true}, ids)

			e.requireRelayedUnchanged()
		})
	}
}

// TestACPTimeoutPattern is ACP's recommended timeout pattern on a command
// that ignores TERM and leaves a setsid escapee: after the timer wins,
// kill returns with nothing of the tree left, the final output is
// complete, and release frees the terminal.
func TestACPTimeoutPattern(t *testing.T) {
	bin := buildCorral(t)
	for name, flags := range acpBackends(t) {
		t.Run(name, func(t *testing.T) {
			marker := proctest.Marker()
			proctest.KillOnCleanup(t, marker)
			e := startACPEditor(t, bin, append(flags, "--grace", "1s")...)
			script := `trap "" TERM; setsid sleep ` + marker + ` & sleep ` + marker + ` & i=0; while [ $i -lt 200 ]; do i=$((i+1)); echo "line $i"; done; echo ready; while :; do sleep 0.05; done`
			res := e.run(
				acpStep{Op: "create", As: "t", Command: "sh", Args: []string{"-c", script}},
				acpStep{Op: "race", T: "t", AfterMS: 1500},
				acpStep{Op: "output", T: "t"},
			)
			require.Nil(t, res[0].Error)
			require.Nil(t, res[1].Error, "%+v", res[1].Error)
			assert.True(t, res[1].TimerWon)
			proctest.RequireGone(t, marker)
			out := res[1].Output
			require.NotNil(t, out.ExitStatus)
			require.NotNil(t, out.ExitStatus.Signal)
			assert.Equal(t, "SIGKILL", *out.ExitStatus.Signal, "TERM is ignored, so KILL ended it")
			var want strings.Builder
			for i := 1; i <= 200; i++ {
				want.WriteString("line " + strconv.Itoa(i) + "\n")
			}
			want.WriteString("ready\n")
			assert.Equal(t, want.String(), out.Output, "the final output is complete")
			require.NotNil(t, res[2].Error, "release freed the terminal")
			assert.Contains(t, res[2].Error.Message, "unknown terminal")
			ps := runCorral(t, bin, nil, "ps", "-a", "--json", "--label", acpterm.SessionLabel+"="+string(e.session))
			assert.JSONEq(t, "[]", ps.stdout, "released terminals leave corral ps")
		})
	}
}

func TestACPProxyKillsTerminalsWhenTheEditorLeaves(t *testing.T) {
	bin := buildCorral(t)
	marker := proctest.Marker()
	proctest.KillOnCleanup(t, marker)
	e := startACPEditor(t, bin)
	res := e.run(acpStep{Op: "create", As: "t", Command: "sh", Args: []string{"-c", `trap "" TERM; setsid sleep ` + marker + ` & sleep ` + marker + ` & wait`}})
	require.Nil(t, res[0].Error)
	proctest.WaitRunning(t, marker, 2)

	require.NoError(t, e.stdin.Close())
	select {
	case <-e.exited:
	case <-time.After(time.Minute):
		require.FailNow(t, "corral acp did not exit after the editor closed its stdin")
	}
	assert.NoError(t, e.waitErr, "stderr:\n%s", e.stderr.String())
	proctest.RequireGone(t, marker)
	ps := runCorral(t, bin, nil, "ps", "-a", "--json", "--label", acpterm.SessionLabel+"="+string(e.session))
	var listed []map[string]any
	require.NoError(t, json.Unmarshal([]byte(ps.stdout), &listed))
	require.Len(t, listed, 1)
	assert.Equal(t, "killed", listed[0]["state"])
}

func TestACPProxyAnswersMalformedJSON(t *testing.T) {
	bin := buildCorral(t)
	e := startACPEditor(t, bin)
	_, err := e.stdin.Write([]byte("{not json\n"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(e.got.String(), `"code":-32700`) }, 30*time.Second, 20*time.Millisecond)
	assert.Contains(t, e.got.String(), "the editor sent a line that is not JSON")
	// The proxy is still there.
	res := e.run(acpStep{Op: "create", As: "t", Command: "echo", Args: []string{"ok"}}, acpStep{Op: "wait", T: "t"}, acpStep{Op: "output", T: "t"})
	assert.Equal(t, "ok\n", res[2].Output.Output)
}
