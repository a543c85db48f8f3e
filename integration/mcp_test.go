package integration

//lint:file-ignore SA1019 MCP logging notifications are deprecated only from protocol 2026-07-28, which this server does not offer (see doc.go); they are how events reach session-based clients.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mcpBinary builds corral (or takes CORRAL_MCP_TEST_BIN, a prebuilt
// binary) and skips when the binary has no mcp subcommand yet.
func mcpBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("CORRAL_MCP_TEST_BIN")
	if bin == "" {
		bin = buildCorral(t)
	}
	out, _ := exec.Command(bin, "mcp", "--help").CombinedOutput()
	if !strings.Contains(string(out), "--token-file") {
		t.Skipf("this corral build has no mcp subcommand (root.AddCommand(newMCPCommand(...)) missing): %s", out)
	}
	return bin
}

// mcpNotes collects the log notifications a client receives.
type mcpNotes struct {
	mu    sync.Mutex
	notes []*mcp.LoggingMessageParams
	wake  chan struct{}
}

func newMCPNotes() *mcpNotes { return &mcpNotes{wake: make(chan struct{}, 1)} }

func (n *mcpNotes) handle(_ context.Context, req *mcp.LoggingMessageRequest) {
	n.mu.Lock()
	n.notes = append(n.notes, req.Params)
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// await returns the first notification whose event matches, waiting up to
// a generous deadline.
func (n *mcpNotes) await(t *testing.T, match func(ev map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		n.mu.Lock()
		for _, p := range n.notes {
			var ev map[string]any
			b, _ := json.Marshal(p.Data)
			if json.Unmarshal(b, &ev) == nil && p.Logger == "corral" && match(ev) {
				n.mu.Unlock()
				return ev
			}
		}
		n.mu.Unlock()
		select {
		case <-n.wake:
		case <-deadline:
			require.FailNow(t, fmt.Sprintf("no matching notification within 60s; got %d others", len(n.notes)))
		}
	}
}

// mcpConnect starts `corral mcp` and connects the SDK's client to it over
// stdio.
func mcpConnect(t *testing.T, bin string, notes *mcpNotes, extra ...string) *mcp.ClientSession {
	t.Helper()
	return mcpConnectEnv(t, bin, nil, notes, extra...)
}

// mcpConnectEnv is mcpConnect with the environment environ (nil: this
// process's).
func mcpConnectEnv(t *testing.T, bin string, environ []string, notes *mcpNotes, extra ...string) *mcp.ClientSession {
	t.Helper()
	opts := &mcp.ClientOptions{}
	if notes != nil {
		opts.LoggingMessageHandler = notes.handle
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "corral-test", Version: "1"}, opts)
	cmd := exec.Command(bin, append([]string{"mcp", "--log-level", "warn"}, extra...)...)
	cmd.Env = environ
	cmd.Stderr = os.Stderr
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err, "connect to corral mcp")
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// mcpCall calls a tool and decodes its structured result into out (if
// non-nil).
func mcpCall(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	require.NoErrorf(t, err, "%s %v: protocol error", tool, args)
	if out != nil && res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		require.NoErrorf(t, json.Unmarshal(b, out), "%s: decode %s", tool, b)
	}
	return res
}

func mcpText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// mcpOK fails unless res is a successful tool result.
func mcpOK(t *testing.T, res *mcp.CallToolResult) {
	t.Helper()
	if res.IsError {
		require.FailNow(t, fmt.Sprintf("tool error: %s", mcpText(res)))
	}
}

// mcpToolError fails unless res is a tool error whose message names every
// want.
func mcpToolError(t *testing.T, res *mcp.CallToolResult, wants ...string) {
	t.Helper()
	if !res.IsError {
		require.FailNow(t, fmt.Sprintf("want a tool error, got %s", mcpText(res)))
	}
	for _, w := range wants {
		if !strings.Contains(mcpText(res), w) {
			assert.Fail(t, fmt.Sprintf("tool error %q lacks %q", mcpText(res), w))
		}
	}
}

type mcpTerminalResult struct {
	ID           string `json:"id"`
	State        string `json:"state"`
	PID          int    `json:"pid"`
	Output       string `json:"output"`
	ExitCode     *int   `json:"exit_code"`
	Signal       string `json:"signal"`
	TimedOut     string `json:"timed_out"`
	Truncated    bool   `json:"truncated"`
	OmittedBytes int64  `json:"omitted_bytes"`
	Yielded      bool   `json:"yielded"`
}

type mcpPollResult struct {
	ID     string `json:"id"`
	State  string `json:"state"`
	Output string `json:"output"`
	Status *struct {
		Code   int    `json:"code"`
		Signal string `json:"signal"`
	} `json:"status"`
	Next         int64 `json:"next"`
	WaitTimedOut bool  `json:"wait_timed_out"`
}

func TestMCPStdio(t *testing.T) {
	bin := mcpBinary(t)
	cs := mcpConnect(t, bin, nil)

	t.Run("list tools", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := cs.ListTools(ctx, nil)
		require.NoError(t, err)
		tools := map[string]*mcp.Tool{}
		for _, tl := range res.Tools {
			tools[tl.Name] = tl
		}
		for _, name := range []string{"terminal", "process"} {
			if tools[name] == nil || tools[name].Description == "" || tools[name].InputSchema == nil {
				require.FailNow(t, fmt.Sprintf("tool %s missing or undocumented: %+v", name, tools[name]))
			}
		}
		schema, _ := json.Marshal(tools["terminal"].InputSchema)
		for _, w := range []string{`"required":["command"]`, `"watch_patterns"`, `"notify_on_complete"`, `"yield_after"`} {
			assert.Truef(t, strings.Contains(string(schema), w), "terminal schema lacks %s: %s", w, schema)
		}
		schema, _ = json.Marshal(tools["process"].InputSchema)
		assert.Truef(t, strings.Contains(string(schema), `"enum":["list","poll","log","wait","kill","write","submit","close","events","remove"]`), "process schema does not enumerate the actions: %s", schema)
	})

	t.Run("foreground", func(t *testing.T) {
		var r mcpTerminalResult
		res := mcpCall(t, cs, "terminal", map[string]any{"command": `printf '\033[1;31mhello\033[0m\n'; echo err >&2; exit 3`}, &r)
		mcpOK(t, res)
		require.Truef(t, r.ExitCode != nil && *r.ExitCode == 3 && r.State == "exited", "want exited with code 3, got %+v", r)
		assert.Truef(t, r.Output == "hello\nerr\n", "output %q: want escapes stripped and stderr merged", r.Output)
		if !strings.Contains(mcpText(res), "exit code 3") || !strings.Contains(mcpText(res), "hello") {
			assert.Fail(t, fmt.Sprintf("text content %q lacks the output or the exit code", mcpText(res)))
		}
	})

	t.Run("foreground output is capped", func(t *testing.T) {
		var r mcpTerminalResult
		mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{"command": `echo FIRST; seq 1 40000; echo LAST`}, &r))
		require.Truef(t, r.Truncated && r.OmittedBytes > 0 && len(r.Output) <= 50_100, "want a capped output, got truncated=%v omitted=%d len=%d", r.Truncated, r.OmittedBytes, len(r.Output))
		if !strings.HasPrefix(r.Output, "FIRST\n") || !strings.HasSuffix(r.Output, "LAST\n") ||
			!regexp.MustCompile(`\n\[\.\.\. \d+ bytes omitted \.\.\.\]\n`).MatchString(r.Output) {
			assert.Fail(t, fmt.Sprintf("capped output does not keep head, tail and the marker: %q … %q", r.Output[:50], r.Output[len(r.Output)-50:]))
		}
	})

	t.Run("foreground timeout kills the tree", func(t *testing.T) {
		marker := cliSleepMarker(t)
		var r mcpTerminalResult
		mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{
			"command": "echo started; sleep " + marker + " & setsid sleep " + marker + " & wait",
			"timeout": "1s",
		}, &r))
		require.Truef(t, r.TimedOut == "timeout" && r.State == "timed_out" && strings.Contains(r.Output, "started"), "want timed_out by timeout with the output so far, got %+v", r)
		cliRequireMarkerGone(t, marker)
	})

	t.Run("background poll wait", func(t *testing.T) {
		var r mcpTerminalResult
		mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{
			"command": "echo one; read x < /dev/null; sleep 0.3; echo two", "background": true}, &r))
		require.Truef(t, strings.HasPrefix(r.ID, "proc_") && r.PID > 0, "background start: %+v", r)
		var p mcpPollResult
		mcpOK(t, mcpCall(t, cs, "process", map[string]any{"action": "poll", "id": r.ID}, &p))
		require.Truef(t, p.ID == r.ID && (p.State == "running" || p.State == "exited"), "poll: %+v", p)
		seen := p.Output
		var w mcpPollResult
		mcpOK(t, mcpCall(t, cs, "process", map[string]any{"action": "wait", "id": r.ID[:9], "timeout": 60}, &w))
		require.Truef(t, w.State == "exited" && w.Status != nil && w.Status.Code == 0 && !w.WaitTimedOut, "wait: %+v", w)
		assert.Truef(t, seen+w.Output == "one\ntwo\n", "poll then wait returned %q + %q: want each byte once", seen, w.Output)
		// An explicit offset re-reads.
		mcpOK(t, mcpCall(t, cs, "process", map[string]any{"action": "poll", "id": r.ID, "offset": 0}, &p))
		assert.Truef(t, p.Output == "one\ntwo\n", "poll from 0: %q", p.Output)
		var lg struct {
			Lines      []string `json:"lines"`
			TotalLines int      `json:"total_lines"`
		}
		mcpOK(t, mcpCall(t, cs, "process", map[string]any{"action": "log", "id": r.ID, "offset": 2, "limit": 1}, &lg))
		assert.Truef(t, len(lg.Lines) == 1 && lg.Lines[0] == "two" && lg.TotalLines == 2, "log line 2: %+v", lg)
		var l struct {
			Processes []struct {
				ID string `json:"id"`
			} `json:"processes"`
		}
		mcpOK(t, mcpCall(t, cs, "process", map[string]any{"action": "list"}, &l))
		assert.Truef(t, strings.Contains(mustJSON(l), r.ID), "list lacks %s: %+v", r.ID, l)
	})

	t.Run("wait times out", func(t *testing.T) {
		marker := cliSleepMarker(t)
		var r mcpTerminalResult
		mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{"command": "sleep " + marker, "background": true}, &r))
		var w mcpPollResult
		mcpOK(t, mcpCall(t, cs, "process", map[string]any{"action": "wait", "id": r.ID, "timeout": 0.2}, &w))
		require.Truef(t, w.WaitTimedOut && w.State == "running", "want wait_timed_out while running, got %+v", w)
		mcpOK(t, mcpCall(t, cs, "process", map[string]any{"action": "kill", "id": r.ID, "signal": "KILL"}, nil))
		cliRequireMarkerGone(t, marker)
	})

	t.Run("kill tree", func(t *testing.T) {
		marker := cliSleepMarker(t)
		var r mcpTerminalResult
		mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{
			"command":    "trap '' TERM; sleep " + marker + " & (setsid sleep " + marker + " &); wait",
			"background": true}, &r))
		cliRequireMarkerRunning(t, marker, 2)
		var k struct {
			ID        string `json:"id"`
			Signal    string `json:"signal"`
			Escalated bool   `json:"escalated"`
			State     string `json:"state"`
			Survivors []int  `json:"survivors"`
		}
		mcpOK(t, mcpCall(t, cs, "process", map[string]any{"action": "kill", "id": r.ID, "signal": "SIGTERM", "grace": "500ms"}, &k))
		require.Truef(t, k.ID == r.ID && k.Signal == "TERM" && k.State == "killed" && len(k.Survivors) == 0, "kill: %+v", k)
		cliRequireMarkerGone(t, marker)
	})

	t.Run("stdin", func(t *testing.T) {
		var r mcpTerminalResult
		mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{"command": "wc -c", "background": true, "stdin": true}, &r))
		mcpOK(t, mcpCall(t, cs, "process", map[string]any{"action": "write", "id": r.ID, "data": "hello"}, nil))
		mcpOK(t, mcpCall(t, cs, "process", map[string]any{"action": "submit", "id": r.ID, "data": "world"}, nil))
		mcpOK(t, mcpCall(t, cs, "process", map[string]any{"action": "close", "id": r.ID}, nil))
		var w mcpPollResult
		mcpOK(t, mcpCall(t, cs, "process", map[string]any{"action": "wait", "id": r.ID, "timeout": "60s"}, &w))
		require.Truef(t, w.State == "exited" && strings.TrimSpace(w.Output) == "11", "wc -c after write, submit, close: %+v", w)
		mcpToolError(t, mcpCall(t, cs, "process", map[string]any{"action": "write", "id": r.ID, "data": "late"}, nil), "not running")
	})

	t.Run("bad arguments", func(t *testing.T) {
		var r mcpTerminalResult
		mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{"command": "true"}, &r))
		cases := []struct {
			name  string
			tool  string
			args  map[string]any
			wants []string
		}{
			{"missing command", "terminal", map[string]any{}, []string{"command"}},
			{"empty command", "terminal", map[string]any{"command": "  "}, []string{"command", "empty"}},
			{"negative timeout", "terminal", map[string]any{"command": "true", "timeout": -1}, []string{"timeout", "negative"}},
			{"bad duration", "terminal", map[string]any{"command": "true", "timeout": "soon"}, []string{"soon", "90s"}},
			{"timeout in background", "terminal", map[string]any{"command": "true", "background": true, "timeout": 5}, []string{"foreground"}},
			{"unknown field", "terminal", map[string]any{"command": "true", "cwd": "/"}, []string{"cwd"}},
			{"bad id", "process", map[string]any{"action": "poll", "id": "nope"}, []string{"nope", "proc_"}},
			{"unknown id", "process", map[string]any{"action": "wait", "id": "proc_000000000000"}, []string{"proc_000000000000", "list"}},
			{"missing id", "process", map[string]any{"action": "kill"}, []string{"id"}},
			{"unknown action", "process", map[string]any{"action": "explode", "id": r.ID}, []string{"explode", "list", "poll", "events"}},
			{"bad signal", "process", map[string]any{"action": "kill", "id": r.ID, "signal": "SIGBOGUS"}, []string{"SIGBOGUS", "TERM"}},
			{"negative wait timeout", "process", map[string]any{"action": "wait", "id": r.ID, "timeout": -5}, []string{"timeout", "negative"}},
			{"negative grace", "process", map[string]any{"action": "kill", "id": r.ID, "grace": "-1s"}, []string{"grace", "negative"}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				mcpToolError(t, mcpCall(t, cs, c.tool, c.args, nil), c.wants...)
			})
		}
	})
}

// TestMCPEvents runs on a server of its own: the registry's global event
// rate limit (15 per 10 s) must not be used up by other tests' processes.
func TestMCPEvents(t *testing.T) {
	bin := mcpBinary(t)
	notes := newMCPNotes()
	// A daemon of its own: the rate limit of the package's shared one
	// counts every other test's events.
	h := newDaemonHome(t, bin)
	cs := mcpConnectEnv(t, bin, h.env, notes)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}))

	var quiet, loud mcpTerminalResult
	mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{"command": "exit 0", "background": true}, &quiet))
	mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{"command": "echo warming; echo 'server READY on :1'; exit 7",
		"background": true, "notify_on_complete": true, "watch_patterns": []string{"READY"}}, &loud))

	exit := notes.await(t, func(ev map[string]any) bool { return ev["type"] == "exited" && ev["id"] == loud.ID })
	assert.Truef(t, exit["notify"] == true && exit["state"] == "exited", "exit notification: %v", exit)
	match := notes.await(t, func(ev map[string]any) bool { return ev["type"] == "watch_match" && ev["id"] == loud.ID })
	assert.Truef(t, match["line"] == "server READY on :1" && match["pattern"] == "READY", "watch notification: %v", match)

	// Wait for the quiet one (its exit is then not repeated by events).
	mcpOK(t, mcpCall(t, cs, "process", map[string]any{"action": "wait", "id": quiet.ID}, nil))

	var evs struct {
		Events []struct {
			Type   string `json:"type"`
			ID     string `json:"id"`
			Notify bool   `json:"notify"`
			Status *struct {
				Code int `json:"code"`
			} `json:"status"`
		} `json:"events"`
	}
	mcpOK(t, mcpCall(t, cs, "process", map[string]any{"action": "events"}, &evs))
	var gotExit, gotMatch bool
	for _, ev := range evs.Events {
		switch {
		case ev.Type == "exited" && ev.ID == loud.ID:
			gotExit = ev.Notify && ev.Status != nil && ev.Status.Code == 7
		case ev.Type == "watch_match" && ev.ID == loud.ID:
			gotMatch = true
		case ev.Type == "exited" && ev.ID == quiet.ID:
			assert.Fail(t, fmt.Sprintf("the exit of %s was repeated by events after wait reported it", quiet.ID))
		}
	}
	require.Truef(t, gotExit && gotMatch, "events lacks the exit (%v) or the watch match (%v): %+v", gotExit, gotMatch, evs)
	// Drained: a second call has nothing of these.
	mcpOK(t, mcpCall(t, cs, "process", map[string]any{"action": "events"}, &evs))
	assert.Truef(t, len(evs.Events) == 0, "events not drained: %+v", evs)
}

func TestMCPHTTP(t *testing.T) {
	bin := mcpBinary(t)
	cmd := exec.Command(bin, "mcp", "--http", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	lines := bufio.NewReader(stderr)
	line, err := lines.ReadString('\n')
	require.NoError(t, err, "read the serving line")
	go func() { _, _ = io.Copy(io.Discard, lines) }()
	m := regexp.MustCompile(`serving (http://127\.0\.0\.1:\d+/mcp) with bearer token ([0-9a-f]{64})`).FindStringSubmatch(line)
	require.Truef(t, m != nil, "unexpected serving line %q", line)
	url, token := m[1], m[2]

	for _, tc := range []struct{ name, auth string }{{"no token", ""}, {"wrong token", "Bearer " + strings.Repeat("0", 64)}} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Truef(t, resp.StatusCode == http.StatusUnauthorized, "status %d, want 401", resp.StatusCode)
		})
	}

	t.Run("client with the token", func(t *testing.T) {
		hc := &http.Client{Transport: mcpBearer{token: token}}
		client := mcp.NewClient(&mcp.Implementation{Name: "corral-test", Version: "1"}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
		require.NoError(t, err)
		defer cs.Close()
		tools, err := cs.ListTools(ctx, nil)
		require.Truef(t, err == nil && len(tools.Tools) == 2, "list tools: %v %+v", err, tools)
		var r mcpTerminalResult
		mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{"command": "echo over http; exit 4"}, &r))
		require.Truef(t, r.Output == "over http\n" && r.ExitCode != nil && *r.ExitCode == 4, "run over HTTP: %+v", r)
		mcpToolError(t, mcpCall(t, cs, "process", map[string]any{"action": "poll", "id": "zz"}, nil), "zz")
	})

	t.Run("non-loopback refused", func(t *testing.T) {
		res := runCorral(t, bin, nil, "mcp", "--http", "0.0.0.0:0")
		require.Truef(t, res.code == 2 && strings.Contains(res.stderr, "loopback"), "want a usage error about loopback, got %d %q", res.code, res.stderr)
	})
	t.Run("in process", func(t *testing.T) {
		cs := mcpConnect(t, bin, nil, "--in-process")
		var r mcpTerminalResult
		mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{"command": "echo private; exit 5"}, &r))
		require.Truef(t, r.Output == "private\n" && r.ExitCode != nil && *r.ExitCode == 5, "in-process run: %+v", r)
		require.True(t, findListed(t, bin, "echo private") == nil, "an --in-process server ran its command in the daemon")
	})
}

type mcpBearer struct{ token string }

func (b mcpBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
