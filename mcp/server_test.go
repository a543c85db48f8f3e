package mcp

//lint:file-ignore SA1019 MCP logging notifications are deprecated only from protocol 2026-07-28, which this server does not offer (see doc.go); they are how events reach session-based clients.

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
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
	reg, err := registry.New(registry.Config{Open: func(context.Context, string) (env.Environment, error) {
		return local.New(local.Options{StateDir: stateDir})
	}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Registry: reg, MaxOutput: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ct, st := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- srv.Run(ctx, st) }()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, opts).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
		_ = srv.Close()
		if _, err := reg.KillAll(context.Background(), registry.KillAllOptions{}); err != nil {
			t.Errorf("KillAll: %v", err)
		}
		_ = reg.Close()
	})
	return srv, cs
}

func call(t *testing.T, cs *sdk.ClientSession, tool string, args map[string]any, out any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if res.IsError {
		t.Fatalf("%s %v: tool error %v", tool, args, res.Content[0].(*sdk.TextContent).Text)
	}
	if out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatal(err)
		}
	}
	return res
}

func TestTerminalCapsOutputAndPollPages(t *testing.T) {
	_, cs := connect(t, nil)
	var r TerminalResult
	call(t, cs, "terminal", map[string]any{"command": "seq 1 2000", "background": true}, &r)
	var w PollResult
	call(t, cs, "process", map[string]any{"action": "wait", "id": r.ID}, &w)
	if !w.Truncated || !strings.HasPrefix(w.Output, "1\n") || !strings.HasSuffix(w.Output, "2000\n") || w.Offset != 0 {
		t.Fatalf("wait output not capped head+tail from 0: truncated=%v offset=%d %q", w.Truncated, w.Offset, w.Output)
	}
	// The cursor moved: nothing new.
	var p PollResult
	call(t, cs, "process", map[string]any{"action": "poll", "id": r.ID}, &p)
	if p.Output != "" || p.Offset != w.Next {
		t.Fatalf("second poll: %+v", p)
	}
	// The middle is still there for log.
	var lg LogResult
	call(t, cs, "process", map[string]any{"action": "log", "id": r.ID, "offset": 1000, "limit": 2}, &lg)
	if strings.Join(lg.Lines, ",") != "1000,1001" {
		t.Fatalf("log lines: %+v", lg.Lines)
	}
	// A log window larger than the byte cap is cut at a line, with the next offset.
	call(t, cs, "process", map[string]any{"action": "log", "id": r.ID, "offset": 1, "limit": 2000}, &lg)
	if !lg.Truncated || lg.NextOffset != 1+len(lg.Lines) || len(strings.Join(lg.Lines, "\n")) > 1000 {
		t.Fatalf("log cap: truncated=%v next=%d lines=%d", lg.Truncated, lg.NextOffset, len(lg.Lines))
	}
}

func TestEventsLongPollAndNotification(t *testing.T) {
	got := make(chan *sdk.LoggingMessageParams, 16)
	_, cs := connect(t, &sdk.ClientOptions{LoggingMessageHandler: func(_ context.Context, r *sdk.LoggingMessageRequest) {
		got <- r.Params
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cs.SetLoggingLevel(ctx, &sdk.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	var r TerminalResult
	call(t, cs, "terminal", map[string]any{"command": "read line; echo $line", "background": true, "stdin": true, "notify_on_complete": true}, &r)
	var ev EventsResult
	call(t, cs, "process", map[string]any{"action": "events"}, &ev) // drains "started"
	call(t, cs, "process", map[string]any{"action": "submit", "id": r.ID, "data": "bye"}, nil)
	call(t, cs, "process", map[string]any{"action": "events", "timeout": "60s"}, &ev)
	if len(ev.Events) != 1 || ev.Events[0].Type != registry.EventExited || ev.Events[0].ID != r.ID || !ev.Events[0].Notify {
		t.Fatalf("events: %+v", ev.Events)
	}
	select {
	case n := <-got:
		b, _ := json.Marshal(n.Data)
		if n.Logger != LoggerName || n.Level != "notice" || !strings.Contains(string(b), r.ID) || !strings.Contains(string(b), `"exited"`) {
			t.Fatalf("notification: %+v %s", n, b)
		}
	case <-ctx.Done():
		t.Fatal("no notification")
	}
}

func TestForegroundRunIsNotAnnounced(t *testing.T) {
	got := make(chan *sdk.LoggingMessageParams, 16)
	_, cs := connect(t, &sdk.ClientOptions{LoggingMessageHandler: func(_ context.Context, r *sdk.LoggingMessageRequest) {
		got <- r.Params
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cs.SetLoggingLevel(ctx, &sdk.SetLoggingLevelParams{Level: "debug"}); err != nil {
		t.Fatal(err)
	}
	call(t, cs, "terminal", map[string]any{"command": "true", "notify_on_complete": true}, nil)
	// A background run afterwards is announced; the foreground one before
	// it must not have been.
	var r TerminalResult
	call(t, cs, "terminal", map[string]any{"command": "true", "background": true, "notify_on_complete": true}, &r)
	select {
	case n := <-got:
		b, _ := json.Marshal(n.Data)
		if !strings.Contains(string(b), r.ID) {
			t.Fatalf("a foreground run's exit was announced: %s", b)
		}
	case <-ctx.Done():
		t.Fatal("no notification for the background run")
	}
}

func TestCloseEndsSessions(t *testing.T) {
	srv, cs := connect(t, nil)
	call(t, cs, "process", map[string]any{"action": "list"}, nil)
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "process", Arguments: map[string]any{"action": "list"}}); err == nil {
		t.Fatal("a call after Close succeeded")
	}
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
	if err != nil {
		t.Fatal(err)
	}
	k, err := srv.reg.Get(ctx, kept.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p.Session == "" || p.Session != p.Labels[SessionLabel] {
		t.Fatalf("the session's process: session %q, label %q; want the lease's ID in both", p.Session, p.Labels[SessionLabel])
	}
	if k.Session != "" || k.Labels[SessionLabel] != p.Session {
		t.Fatalf("the persisted process: session %q (want none), label %q", k.Session, k.Labels[SessionLabel])
	}
	_ = cs.Close()
	end, err := srv.reg.WaitTree(ctx, plain.ID, 0)
	if err != nil || end.State != registry.StateKilled {
		t.Fatalf("the session's process after its end: %v %+v", err, end.State)
	}
	if _, err := srv.reg.Start(ctx, registry.StartOptions{Command: "true", Session: p.Session}); !errors.Is(err, registry.ErrInvalidOptions) {
		t.Fatalf("a start in the ended session: %v", err)
	}
	if k, err = srv.reg.Get(ctx, kept.ID); err != nil || k.State != registry.StateRunning {
		t.Fatalf("the persisted process after the session's end: %v %+v", err, k.State)
	}
}
