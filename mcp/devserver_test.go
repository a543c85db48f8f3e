package mcp

//lint:file-ignore SA1019 MCP logging notifications are deprecated only from protocol 2026-07-28, which this server does not offer (see doc.go); they are how events reach session-based clients.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/registry"
)

// callErr calls a tool that must fail and returns its error text.
func callErr(t *testing.T, cs *sdk.ClientSession, tool string, args map[string]any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
	require.NoError(t, err)
	require.True(t, res.IsError, "%s %v succeeded", tool, args)
	return res.Content[0].(*sdk.TextContent).Text
}

// TestTerminalDevServerArgsChecked: the dev-server arguments are refused,
// saying why, where they do not apply or do not parse, before anything
// starts.
func TestTerminalDevServerArgsChecked(t *testing.T) {
	_, cs := connect(t, nil)
	bg := func(kv ...any) map[string]any {
		m := map[string]any{"command": "true", "background": true}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"command": "true", "name": "web"}, `"name" applies to background processes`},
		{map[string]any{"command": "true", "ready_port": 3000}, `"ready_port" applies to background processes`},
		{map[string]any{"command": "true", "ttl": "1h"}, `"ttl" applies to background processes`},
		{bg("replace", true), `"replace" needs "name"`},
		{bg("ready_port", 70000), `"ready_port" 70000 is not a TCP port`},
		{bg("ready_pattern", "("), `"ready_pattern" is not a valid regular expression`},
		{bg("ready_url", "ftp://h/"), `"ready_url" "ftp://h/" has scheme "ftp"`},
		{bg("ttl", -1), `"ttl" is negative (-1s): give seconds >= 0`},
		{bg("timeout", 5), `"timeout" applies to foreground runs only`},
		{bg("name", "cafe"), "could be read as a process ID prefix"},
		{map[string]any{"action": "poll", "id": "web", "ready": true}, `"ready" applies to action wait only`},
		{map[string]any{"action": "wait", "id": "web", "ready": true, "tree": true}, "give one of them"},
	} {
		tool := "terminal"
		if _, ok := tc.args["action"]; ok {
			tool = "process"
		}
		assert.Contains(t, callErr(t, cs, tool, tc.args), tc.want, "%v", tc.args)
	}
}

// TestDevServerReadyCrashAndReuse: a named background process with a
// ready pattern is reused by a second start, process wait ready=true
// returns once it is ready, and its ready and crashed events are pushed
// as notifications; one that ends before it is ready says so; a ttl
// kills with a ttl_expired notification.
func TestDevServerReadyCrashAndReuse(t *testing.T) {
	notes := make(chan registry.Event, 64)
	levels := make(chan sdk.LoggingLevel, 64)
	_, cs := connect(t, &sdk.ClientOptions{LoggingMessageHandler: func(_ context.Context, r *sdk.LoggingMessageRequest) {
		var ev registry.Event
		b, _ := json.Marshal(r.Params.Data)
		if r.Params.Logger == LoggerName && json.Unmarshal(b, &ev) == nil && ev.Type != registry.EventWatchMatch {
			notes <- ev
			levels <- r.Params.Level
		}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, cs.SetLoggingLevel(ctx, &sdk.SetLoggingLevelParams{Level: "info"}))
	next := func(typ registry.EventType, id string) (registry.Event, sdk.LoggingLevel) {
		t.Helper()
		for {
			select {
			case ev := <-notes:
				lv := <-levels
				if ev.Type == typ && ev.ID == id {
					return ev, lv
				}
			case <-ctx.Done():
				require.Failf(t, "no notification", "no %s notification for %s", typ, id)
			}
		}
	}

	dir := t.TempDir()
	up, die := filepath.Join(dir, "up"), filepath.Join(dir, "die")
	start := map[string]any{"background": true, "name": "web", "ready_pattern": "^listening on", "persist": true,
		"command": fmt.Sprintf("while [ ! -e '%s' ]; do sleep 0.01; done; echo listening on 3000; while [ ! -e '%s' ]; do sleep 0.01; done; echo boom; exit 3", up, die)}
	var r TerminalResult
	res := call(t, cs, "terminal", start, &r)
	assert.Equal(t, "web", r.Name)
	assert.False(t, r.Reused)
	assert.Contains(t, res.Content[0].(*sdk.TextContent).Text, "wait with ready=true")

	var again TerminalResult
	res = call(t, cs, "terminal", start, &again)
	assert.True(t, again.Reused)
	assert.Equal(t, r.ID, again.ID)
	assert.Contains(t, res.Content[0].(*sdk.TextContent).Text, "reused "+r.ID+" (web): already running with the same command")

	// Each result is decoded into a fresh value: omitted fields must not
	// keep the last one's.
	var early PollResult
	call(t, cs, "process", map[string]any{"action": "wait", "id": "web", "ready": true, "timeout": 0.05}, &early)
	assert.True(t, early.WaitTimedOut, "ready before it printed the line: %+v", early)
	require.NoError(t, os.WriteFile(up, nil, 0o600))
	var w PollResult
	call(t, cs, "process", map[string]any{"action": "wait", "id": "web", "ready": true, "timeout": 30}, &w)
	assert.False(t, w.WaitTimedOut)
	assert.False(t, w.EndedBeforeReady)
	assert.False(t, w.ReadyAt.IsZero(), "ready_at")
	assert.Equal(t, registry.StateRunning, w.State)
	assert.Equal(t, "listening on 3000\n", w.Output)
	_, lv := next(registry.EventReady, r.ID)
	assert.Equal(t, sdk.LoggingLevel("notice"), lv)

	require.NoError(t, os.WriteFile(die, nil, 0o600))
	ev, lv := next(registry.EventCrashed, r.ID)
	assert.Equal(t, sdk.LoggingLevel("error"), lv)
	if assert.NotNil(t, ev.Status) {
		assert.Equal(t, 3, ev.Status.Code)
	}
	assert.Contains(t, ev.Tail, "boom")

	// Ended before it was ready.
	var failed TerminalResult
	call(t, cs, "terminal", map[string]any{"background": true, "ready_pattern": "^listening", "command": "echo 'error: port in use'; exit 1"}, &failed)
	var fw PollResult
	call(t, cs, "process", map[string]any{"action": "wait", "id": failed.ID, "ready": true, "timeout": 30}, &fw)
	assert.True(t, fw.EndedBeforeReady, "%+v", fw)
	assert.Equal(t, registry.StateExited, fw.State)
	assert.Equal(t, "error: port in use\n", fw.Output)

	// A ttl that runs out.
	var ttl TerminalResult
	call(t, cs, "terminal", map[string]any{"background": true, "ttl": 0.2, "command": "sleep 60"}, &ttl)
	_, lv = next(registry.EventTTLExpired, ttl.ID)
	assert.Equal(t, sdk.LoggingLevel("warning"), lv)
	var tw PollResult
	call(t, cs, "process", map[string]any{"action": "wait", "id": ttl.ID, "timeout": 30}, &tw)
	assert.Equal(t, registry.StateTimedOut, tw.State)
	assert.Equal(t, registry.TimedOutTTL, tw.TimedOut)
}
