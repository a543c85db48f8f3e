package mcp

//lint:file-ignore SA1019 MCP logging notifications are deprecated only from protocol 2026-07-28, which this server does not offer (see doc.go); they are how events reach session-based clients.

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
	"github.com/corralhq/corral/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// connect serves a fresh registry on the local backend to an in-memory
// client session; everything is closed at the end of the test.
func connect(t *testing.T, opts *sdk.ClientOptions) (*Server, *sdk.ClientSession) {
	t.Helper()
	return connectLogged(t, opts, nil)
}

// connectLogged is connect with the registry logging to log (nil: the
// default logger).
func connectLogged(t *testing.T, opts *sdk.ClientOptions, log *slog.Logger) (*Server, *sdk.ClientSession) {
	t.Helper()
	stateDir := t.TempDir()
	_, srv, cs := connectTo(t, func(context.Context, string) (env.Environment, error) {
		return local.New(local.Options{StateDir: stateDir})
	}, opts, log)
	return srv, cs
}

// connectTo serves a fresh registry whose backends open was given to an
// in-memory client session; whatever runs is killed and everything is
// closed at the end of the test.
func connectTo(t *testing.T, open func(context.Context, string) (env.Environment, error), opts *sdk.ClientOptions, log *slog.Logger) (*registry.Registry, *Server, *sdk.ClientSession) {
	t.Helper()
	reg, err := registry.New(registry.Config{Open: open, Logger: log})
	require.NoError(t, err)
	srv, err := New(Config{Registry: reg, MaxOutput: 1000})
	require.NoError(t, err)
	ct, st := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- srv.Run(ctx, st) }()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, opts).Connect(context.Background(), ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.Close()
		cancel()
		assert.NoError(t, <-runDone, "Run")
		_ = srv.Close()
		_, err := reg.KillAll(context.Background(), registry.KillAllOptions{})
		assert.NoError(t, err, "KillAll")
		_ = reg.Close()
	})
	return reg, srv, cs
}

func call(t *testing.T, cs *sdk.ClientSession, tool string, args map[string]any, out any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
	require.NoError(t, err, tool)
	if res.IsError {
		require.Failf(t, "tool error", "%s %v: %s", tool, args, res.Content[0].(*sdk.TextContent).Text)
	}
	if out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		require.NoError(t, json.Unmarshal(b, out))
	}
	return res
}

func TestTerminalCapsOutputAndPollPages(t *testing.T) {
	_, cs := connect(t, nil)
	var r TerminalResult
	call(t, cs, "terminal", map[string]any{"command": "seq 1 2000", "background": true}, &r)
	var w PollResult
	call(t, cs, "process", map[string]any{"action": "wait", "id": r.ID}, &w)
	require.True(t, w.Truncated, "wait output not capped")
	require.True(t, strings.HasPrefix(w.Output, "1\n") && strings.HasSuffix(w.Output, "2000\n"), "head and tail kept: %q", w.Output)
	require.Zero(t, w.Offset, "from 0")
	// The cursor moved: nothing new.
	var p PollResult
	call(t, cs, "process", map[string]any{"action": "poll", "id": r.ID}, &p)
	require.Empty(t, p.Output, "second poll: %+v", p)
	require.Equal(t, w.Next, p.Offset, "second poll: %+v", p)
	// The middle is still there for log.
	var lg LogResult
	call(t, cs, "process", map[string]any{"action": "log", "id": r.ID, "offset": 1000, "limit": 2}, &lg)
	require.Equal(t, []string{"1000", "1001"}, lg.Lines)
	// A log window larger than the byte cap is cut at a line, with the next offset.
	call(t, cs, "process", map[string]any{"action": "log", "id": r.ID, "offset": 1, "limit": 2000}, &lg)
	require.True(t, lg.Truncated, "log cap")
	require.Equal(t, 1+len(lg.Lines), lg.NextOffset, "log cap: the next offset")
	require.LessOrEqual(t, len(strings.Join(lg.Lines, "\n")), 1000, "log cap")
}

func TestEventsLongPollAndNotification(t *testing.T) {
	got := make(chan *sdk.LoggingMessageParams, 16)
	_, cs := connect(t, &sdk.ClientOptions{LoggingMessageHandler: func(_ context.Context, r *sdk.LoggingMessageRequest) {
		got <- r.Params
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, cs.SetLoggingLevel(ctx, &sdk.SetLoggingLevelParams{Level: "info"}))
	var r TerminalResult
	call(t, cs, "terminal", map[string]any{"command": "read line; echo $line", "background": true, "stdin": true, "notify_on_complete": true}, &r)
	var ev EventsResult
	call(t, cs, "process", map[string]any{"action": "events"}, &ev) // drains "started"
	call(t, cs, "process", map[string]any{"action": "submit", "id": r.ID, "data": "bye"}, nil)
	call(t, cs, "process", map[string]any{"action": "events", "timeout": "60s"}, &ev)
	require.Len(t, ev.Events, 1, "events: %+v", ev.Events)
	require.Equal(t, registry.EventExited, ev.Events[0].Type)
	require.Equal(t, r.ID, ev.Events[0].ID)
	require.True(t, ev.Events[0].Notify)
	select {
	case n := <-got:
		b, _ := json.Marshal(n.Data)
		require.Equal(t, LoggerName, n.Logger)
		require.Equal(t, sdk.LoggingLevel("notice"), n.Level)
		require.Contains(t, string(b), r.ID)
		require.Contains(t, string(b), `"exited"`)
	case <-ctx.Done():
		require.Fail(t, "no notification")
	}
}

func TestForegroundRunIsNotAnnounced(t *testing.T) {
	got := make(chan *sdk.LoggingMessageParams, 16)
	_, cs := connect(t, &sdk.ClientOptions{LoggingMessageHandler: func(_ context.Context, r *sdk.LoggingMessageRequest) {
		got <- r.Params
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, cs.SetLoggingLevel(ctx, &sdk.SetLoggingLevelParams{Level: "debug"}))
	call(t, cs, "terminal", map[string]any{"command": "true", "notify_on_complete": true}, nil)
	// A background run afterwards is announced; the foreground one before
	// it must not have been.
	var r TerminalResult
	call(t, cs, "terminal", map[string]any{"command": "true", "background": true, "notify_on_complete": true}, &r)
	select {
	case n := <-got:
		b, _ := json.Marshal(n.Data)
		require.Contains(t, string(b), r.ID, "a foreground run's exit was announced")
	case <-ctx.Done():
		require.Fail(t, "no notification for the background run")
	}
}

func TestCloseEndsSessions(t *testing.T) {
	srv, cs := connect(t, nil)
	call(t, cs, "process", map[string]any{"action": "list"}, nil)
	require.NoError(t, srv.Close())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "process", Arguments: map[string]any{"action": "list"}})
	require.Error(t, err, "a call after Close succeeded")
}

// A session's processes live under its lease, and its persisted ones do
// not: the registry, not this server, kills the first when the session
// ends (or, through the daemon, when this process dies), and leaves the
// second running.
func TestSessionLeaseHoldsAllButPersisted(t *testing.T) {
	srv, cs := connect(t, nil)
	var plain, kept TerminalResult
	call(t, cs, "terminal", map[string]any{"command": "sleep 60", "background": true}, &plain)
	call(t, cs, "terminal", map[string]any{"command": "sleep 60", "background": true, "persist": true}, &kept)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := srv.reg.Get(ctx, plain.ID)
	require.NoError(t, err)
	k, err := srv.reg.Get(ctx, kept.ID)
	require.NoError(t, err)
	require.NotEmpty(t, p.Session, "the session's process has the lease's ID as its session")
	require.Equal(t, p.Session, p.Labels[SessionLabel], "the session's process: its label is the lease's ID")
	require.Empty(t, k.Session, "the persisted process has no session")
	require.Equal(t, p.Session, k.Labels[SessionLabel], "the persisted process still carries the session's label")
	_ = cs.Close()
	end, err := srv.reg.WaitTree(ctx, plain.ID, 0)
	require.NoError(t, err)
	require.Equal(t, registry.StateKilled, end.State, "the session's process after its end")
	_, err = srv.reg.Start(ctx, registry.StartOptions{Command: "true", Session: p.Session})
	require.ErrorIs(t, err, registry.ErrInvalidOptions, "a start in the ended session")
	k, err = srv.reg.Get(ctx, kept.ID)
	require.NoError(t, err)
	require.Equal(t, registry.StateRunning, k.State, "the persisted process after the session's end")
}
