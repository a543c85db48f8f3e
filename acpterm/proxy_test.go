package acpterm

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	acp "github.com/coder/acp-go-sdk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/internal/testing/acptest"
	"github.com/corralhq/corral/internal/testing/proctest"
	"github.com/corralhq/corral/registry"
)

// tapedWriter writes to w, recording what it wrote; writes are serialised,
// so a test can write raw lines beside an SDK connection.
type tapedWriter struct {
	mu   sync.Mutex
	w    io.WriteCloser
	tape *acptest.Tape
}

func (tw *tapedWriter) Write(p []byte) (int, error) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	_, _ = tw.tape.Write(p)
	return tw.w.Write(p)
}

func (tw *tapedWriter) Close() error { return tw.w.Close() }

// testAgent is an ACP agent whose terminal calls the test makes itself,
// through its connection.
type testAgent struct {
	acptest.AgentBase
	mu   sync.Mutex
	init acp.InitializeRequest
	conn *acp.AgentSideConnection
}

func (a *testAgent) Initialize(_ context.Context, p acp.InitializeRequest) (acp.InitializeResponse, error) {
	a.mu.Lock()
	a.init = p
	a.mu.Unlock()
	return acp.InitializeResponse{ProtocolVersion: acp.ProtocolVersionNumber}, nil
}
func (a *testAgent) NewSession(context.Context, acp.NewSessionRequest) (acp.NewSessionResponse, error) {
	return acp.NewSessionResponse{SessionId: session}, nil
}
func (a *testAgent) Prompt(ctx context.Context, p acp.PromptRequest) (acp.PromptResponse, error) {
	_ = a.conn.SessionUpdate(ctx, acp.SessionNotification{SessionId: p.SessionId, Update: acp.UpdateAgentMessageText("héllo \u2028 <tag> & done")})
	return acp.PromptResponse{StopReason: acp.StopReasonEndTurn}, nil
}

// proxied is an editor and an agent, both written with the SDK, joined by
// a Proxy, with every byte each side sent and received on tape.
type proxied struct {
	terms  *Terminals
	editor *acptest.Editor
	agent  *testAgent
	ed     *acp.ClientSideConnection
	ag     *acp.AgentSideConnection

	editorSent, editorGot, agentSent, agentGot *acptest.Tape
	editorW, agentW                            *tapedWriter // raw lines beside the SDK's

	done  chan struct{}
	ended Ended
	err   error
	close func()
}

func newProxied(t *testing.T) *proxied {
	t.Helper()
	terms, _ := newTerminals(t)
	quiet := slog.New(slog.DiscardHandler)
	p := &proxied{terms: terms, editor: &acptest.Editor{T: t}, agent: &testAgent{},
		editorSent: &acptest.Tape{}, editorGot: &acptest.Tape{}, agentSent: &acptest.Tape{}, agentGot: &acptest.Tape{}, done: make(chan struct{})}

	edToProxyR, edToProxyW := io.Pipe()
	proxyToEdR, proxyToEdW := io.Pipe()
	proxyToAgR, proxyToAgW := io.Pipe()
	agToProxyR, agToProxyW := io.Pipe()
	p.editorW = &tapedWriter{w: edToProxyW, tape: p.editorSent}
	p.agentW = &tapedWriter{w: agToProxyW, tape: p.agentSent}

	p.ed = acp.NewClientSideConnection(p.editor, p.editorW, io.TeeReader(proxyToEdR, p.editorGot))
	p.ed.SetLogger(quiet)
	p.ag = acp.NewAgentSideConnection(p.agent, p.agentW, io.TeeReader(proxyToAgR, p.agentGot))
	p.ag.SetLogger(quiet)
	p.agent.conn = p.ag

	proxy := &Proxy{Terminals: terms, Logger: quiet}
	go func() {
		defer close(p.done)
		p.ended, p.err = proxy.Run(context.Background(), Streams{EditorIn: edToProxyR, EditorOut: proxyToEdW, AgentIn: proxyToAgW, AgentOut: agToProxyR})
	}()
	p.close = func() {
		_ = edToProxyW.Close()
		_ = agToProxyW.Close()
		<-p.done
		_ = proxyToEdW.Close()
		_ = proxyToAgR.Close()
		<-p.ed.Done()
		<-p.ag.Done()
	}
	t.Cleanup(p.close)
	return p
}

func (p *proxied) initialize(t *testing.T) {
	t.Helper()
	_, err := p.ed.Initialize(ctxT(t), acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber,
		ClientCapabilities: acp.ClientCapabilities{Fs: acp.FileSystemCapabilities{ReadTextFile: true}}})
	require.NoError(t, err)
	_, err = p.ed.NewSession(ctxT(t), acp.NewSessionRequest{Cwd: "/", McpServers: []acp.McpServer{}})
	require.NoError(t, err)
}

type wire struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func parseWire(t *testing.T, line string) wire {
	t.Helper()
	var w wire
	require.NoError(t, json.Unmarshal([]byte(line), &w), "line %q", line)
	return w
}

func TestProxyServesTerminalsAndRelaysEverythingElseUnchanged(t *testing.T) {
	p := newProxied(t)
	p.initialize(t)
	p.agent.mu.Lock()
	caps := p.agent.init.ClientCapabilities
	p.agent.mu.Unlock()
	assert.True(t, caps.Terminal, "the agent is told the client has terminals")
	assert.True(t, caps.Fs.ReadTextFile, "the rest of the editor's capabilities pass through")

	// A hand-written message, spaced and escaped as no encoder would: it
	// must reach the agent as these very bytes.
	raw := `{"jsonrpc":"2.0" , "method":"_corral/odd","params":{"z":1,"a":"\u00e9\/x"}}`
	_, err := p.editorW.Write([]byte(raw + "\n"))
	require.NoError(t, err)

	ctx := ctxT(t)
	created, err := p.ag.CreateTerminal(ctx, acp.CreateTerminalRequest{SessionId: session, Command: "printf", Args: []string{"%s\n", "one two", "€"}})
	require.NoError(t, err)
	exit, err := p.ag.WaitForTerminalExit(ctx, acp.WaitForTerminalExitRequest{SessionId: session, TerminalId: created.TerminalId})
	require.NoError(t, err)
	require.NotNil(t, exit.ExitCode)
	assert.Equal(t, 0, *exit.ExitCode)
	out, err := p.ag.TerminalOutput(ctx, acp.TerminalOutputRequest{SessionId: session, TerminalId: created.TerminalId})
	require.NoError(t, err)
	assert.Equal(t, "one two\n€\n", out.Output)
	_, err = p.ag.KillTerminal(ctx, acp.KillTerminalRequest{SessionId: session, TerminalId: created.TerminalId})
	require.NoError(t, err)
	_, err = p.ag.ReleaseTerminal(ctx, acp.ReleaseTerminalRequest{SessionId: session, TerminalId: created.TerminalId})
	require.NoError(t, err)
	_, err = p.ag.TerminalOutput(ctx, acp.TerminalOutputRequest{SessionId: session, TerminalId: created.TerminalId})
	var re *acp.RequestError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, CodeResourceNotFound, re.Code)
	assert.Contains(t, re.Message, "unknown terminal")

	_, err = p.ed.Prompt(ctx, acp.PromptRequest{SessionId: session, Prompt: []acp.ContentBlock{acp.TextBlock("go")}})
	require.NoError(t, err)

	// Everything the editor sent reached the agent byte for byte, but the
	// initialize request, which gained the terminal capability; the agent
	// also got the proxy's answers to its terminal requests.
	terminalIDs := map[string]bool{}
	var agentSentRelayed []string
	for _, l := range p.agentSent.Lines() {
		w := parseWire(t, l)
		if strings.HasPrefix(w.Method, "terminal/") {
			terminalIDs[string(w.ID)] = true
			continue
		}
		agentSentRelayed = append(agentSentRelayed, l)
	}
	assert.Len(t, terminalIDs, 6)
	var editorSent []string
	for _, l := range p.editorSent.Lines() {
		if parseWire(t, l).Method != "initialize" {
			editorSent = append(editorSent, l)
		}
	}
	require.Contains(t, editorSent, raw)
	var agentGotRelayed []string
	for _, l := range p.agentGot.Lines() {
		w := parseWire(t, l)
		if w.Method == "initialize" || (w.Method == "" && terminalIDs[string(w.ID)]) {
			continue
		}
		agentGotRelayed = append(agentGotRelayed, l)
	}
	assert.Equal(t, editorSent, agentGotRelayed, "editor → agent relayed byte for byte")
	require.Eventually(t, func() bool { return len(p.editorGot.Lines()) >= len(agentSentRelayed) }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, agentSentRelayed, p.editorGot.Lines(), "agent → editor relayed byte for byte, terminal requests not at all")
	assert.Len(t, p.editor.Updates(), 1)
}

func TestProxyAnswersMalformedJSONFromEitherSide(t *testing.T) {
	p := newProxied(t)
	p.initialize(t)

	_, err := p.editorW.Write([]byte("this is not json\n"))
	require.NoError(t, err)
	_, err = p.agentW.Write([]byte("{\"jsonrpc\":\"2.0\",\"method\":\n"))
	require.NoError(t, err)
	_, err = p.agentW.Write([]byte("[1,2]\n"))
	require.NoError(t, err)
	_, err = p.agentW.Write([]byte(`{"jsonrpc":"2.0","id":7,"method":"terminal/output","params":{"sessionId":"sess-1"}}` + "\n"))
	require.NoError(t, err)
	_, err = p.agentW.Write([]byte(`{"jsonrpc":"2.0","id":8,"method":"terminal/create","params":{"sessionId":"sess-1","command":"true","outputByteLimit":-5}}` + "\n"))
	require.NoError(t, err)
	_, err = p.agentW.Write([]byte(`{"jsonrpc":"2.0","id":9,"method":"terminal/resize","params":{}}` + "\n"))
	require.NoError(t, err)

	errorsIn := func(tp *acptest.Tape) []wire {
		var ws []wire
		for _, l := range tp.Lines() {
			if w := parseWire(t, l); w.Error != nil {
				ws = append(ws, w)
			}
		}
		return ws
	}
	require.Eventually(t, func() bool { return len(errorsIn(p.editorGot)) >= 1 && len(errorsIn(p.agentGot)) >= 5 }, 10*time.Second, 10*time.Millisecond)
	ed := errorsIn(p.editorGot)
	assert.Equal(t, -32700, ed[0].Error.Code)
	assert.Contains(t, ed[0].Error.Message, "the editor sent a line that is not JSON")
	assert.Equal(t, "null", string(ed[0].ID))

	byID := map[string]wire{}
	var nullIDs []wire
	for _, w := range errorsIn(p.agentGot) {
		if string(w.ID) == "null" {
			nullIDs = append(nullIDs, w)
		} else {
			byID[string(w.ID)] = w
		}
	}
	require.Len(t, nullIDs, 2)
	assert.Equal(t, -32700, nullIDs[0].Error.Code)
	assert.Contains(t, nullIDs[0].Error.Message, "the agent sent a line that is not JSON")
	assert.Equal(t, -32600, nullIDs[1].Error.Code)
	assert.Contains(t, nullIDs[1].Error.Message, "not a JSON-RPC message object")
	assert.Equal(t, CodeInvalidParams, byID["7"].Error.Code)
	assert.Contains(t, byID["7"].Error.Message, "terminalId is required")
	assert.Equal(t, CodeInvalidParams, byID["8"].Error.Code)
	assert.Contains(t, byID["8"].Error.Message, "outputByteLimit -5 is negative")
	assert.Equal(t, -32601, byID["9"].Error.Code)
	assert.Contains(t, byID["9"].Error.Message, "terminal/resize")

	// Nothing malformed was relayed, and the proxy still works.
	for _, l := range p.agentGot.Lines() {
		assert.NotContains(t, l, "this is not json")
	}
	_, err = p.ed.Prompt(ctxT(t), acp.PromptRequest{SessionId: session, Prompt: []acp.ContentBlock{acp.TextBlock("still there?")}})
	require.NoError(t, err)
}

func TestProxyAbsorbsTheCancelOfATerminalRequest(t *testing.T) {
	p := newProxied(t)
	p.initialize(t)
	created, err := p.ag.CreateTerminal(ctxT(t), acp.CreateTerminalRequest{SessionId: session, Command: "sleep", Args: []string{"30"}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(ctxT(t), 200*time.Millisecond)
	defer cancel()
	_, err = p.ag.WaitForTerminalExit(ctx, acp.WaitForTerminalExitRequest{SessionId: session, TerminalId: created.TerminalId})
	require.Error(t, err)

	// The proxy answers the cancelled request itself: the agent gets a
	// cancellation response, and the editor, which never saw the request,
	// never sees its cancel.
	require.Eventually(t, func() bool {
		for _, l := range p.agentGot.Lines() {
			if w := parseWire(t, l); w.Error != nil && w.Error.Code == -32800 {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
	for _, l := range p.editorGot.Lines() {
		assert.NotContains(t, l, "$/cancel_request")
	}
}

// TestProxyKillsTerminalsWhenASideGoesAway: whichever side leaves first,
// Run ends, and every terminal not released is killed, tree and all; the
// process stays listed as finished.
func TestProxyKillsTerminalsWhenASideGoesAway(t *testing.T) {
	for _, side := range []Ended{EditorEnded, AgentEnded} {
		t.Run(side.String(), func(t *testing.T) {
			p := newProxied(t)
			p.initialize(t)
			marker := proctest.Marker()
			proctest.KillOnCleanup(t, marker)
			created, err := p.ag.CreateTerminal(ctxT(t), stubbornTree(marker))
			require.NoError(t, err)
			proctest.WaitRunning(t, marker, 2)

			leaving := p.editorW
			if side == AgentEnded {
				leaving = p.agentW
			}
			require.NoError(t, leaving.Close())
			select {
			case <-p.done:
			case <-time.After(time.Minute):
				t.Fatalf("Run did not return after the %s", side)
			}
			assert.Equal(t, side, p.ended)
			require.NoError(t, p.err)
			proctest.RequireGone(t, marker)
			assert.Empty(t, p.terms.Active())
			<-p.ag.Done() // the agent read end of file on its stdin
			info, err := p.terms.cfg.Service.Get(ctxT(t), created.TerminalId)
			require.NoError(t, err)
			assert.Equal(t, registry.StateKilled, info.State)
		})
	}
}

func TestAdvertiseTerminalKeepsTheRest(t *testing.T) {
	got, err := advertiseTerminal([]byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true},"terminal":false,"_meta":{"x":[1]}},"clientInfo":{"name":"zed"}}}`))
	require.NoError(t, err)
	var v map[string]any
	require.NoError(t, json.Unmarshal(got, &v))
	params := v["params"].(map[string]any)
	caps := params["clientCapabilities"].(map[string]any)
	assert.Equal(t, true, caps["terminal"])
	assert.Equal(t, map[string]any{"readTextFile": true}, caps["fs"])
	assert.Equal(t, map[string]any{"x": []any{1.0}}, caps["_meta"])
	assert.Equal(t, map[string]any{"name": "zed"}, params["clientInfo"])
	assert.Equal(t, 0.0, v["id"])

	got, err = advertiseTerminal([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`))
	require.NoError(t, err)
	assert.Contains(t, string(got), `"clientCapabilities":{"terminal":true}`)
}

func TestReadLineDropsOverlongLines(t *testing.T) {
	// A buffer smaller than the lines, so they arrive in pieces.
	br := bufio.NewReaderSize(strings.NewReader(strings.Repeat("x", 100)+"\nshort\n"+strings.Repeat("y", 40)+"\nlast"), 16)
	_, err := readLine(br, 50)
	assert.ErrorIs(t, err, errLineTooLong)
	line, err := readLine(br, 50)
	require.NoError(t, err)
	assert.Equal(t, "short\n", string(line))
	line, err = readLine(br, 50)
	require.NoError(t, err)
	assert.Equal(t, strings.Repeat("y", 40)+"\n", string(line), "a line longer than the buffer but within the limit")
	line, err = readLine(br, 50)
	assert.ErrorIs(t, err, io.EOF)
	assert.Equal(t, "last", string(line))
}
