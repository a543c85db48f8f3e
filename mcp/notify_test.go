package mcp

//lint:file-ignore SA1019 MCP logging notifications are deprecated only from protocol 2026-07-28, which this server does not offer (see doc.go); they are how events reach session-based clients.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/registry"
)

// logBuffer is a registry log the test can search.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// hasLine reports whether one logged line contains every one of subs.
func (b *logBuffer) hasLine(subs ...string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for line := range strings.Lines(b.buf.String()) {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(line, s)
		}
		if all {
			return true
		}
	}
	return false
}

// Every notify_on_complete exit is pushed as a notification with its
// status and output tail, although the started events alone overflow the
// registry's global breaker; an exit the client received through process
// wait is not pushed.
func TestNotifiedExitsAllPushed(t *testing.T) {
	const jobs = registry.GlobalEventMax + 3
	notes := make(chan registry.Event, 256)
	logs := &logBuffer{}
	_, cs := connectLogged(t, &sdk.ClientOptions{LoggingMessageHandler: func(_ context.Context, r *sdk.LoggingMessageRequest) {
		var ev registry.Event
		b, _ := json.Marshal(r.Params.Data)
		if r.Params.Logger == LoggerName && json.Unmarshal(b, &ev) == nil {
			notes <- ev
		}
	}}, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, cs.SetLoggingLevel(ctx, &sdk.SetLoggingLevelParams{Level: "info"}))

	// A process the client waits for: it ends once the wait is blocked.
	gate := filepath.Join(t.TempDir(), "gate")
	var w TerminalResult
	call(t, cs, "terminal", map[string]any{"background": true, "notify_on_complete": true,
		"command": fmt.Sprintf("while [ ! -e '%s' ]; do sleep 0.01; done; echo waited; exit 7", gate)}, &w)
	type waitResult struct {
		res *sdk.CallToolResult
		err error
	}
	waited := make(chan waitResult, 1)
	go func() {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "process", Arguments: map[string]any{"action": "wait", "id": w.ID, "timeout": "60s"}})
		waited <- waitResult{res, err}
	}()
	require.Eventually(t, func() bool { return logs.hasLine("wait: blocked until the process ends", "id="+w.ID) },
		time.Minute, 5*time.Millisecond, "process wait did not block")
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	wres := <-waited
	require.NoError(t, wres.err)
	require.False(t, wres.res.IsError)
	var res PollResult
	b, _ := json.Marshal(wres.res.StructuredContent)
	require.NoError(t, json.Unmarshal(b, &res))
	require.Equal(t, registry.StateExited, res.State)

	want := map[string]int{}
	for i := range jobs {
		var r TerminalResult
		call(t, cs, "terminal", map[string]any{"background": true, "notify_on_complete": true,
			"command": fmt.Sprintf("printf 'job\\n\\033[1mresult %d\\033[0m\\n'; exit %d", i, i)}, &r)
		want[r.ID] = i
	}
	got := map[string]registry.Event{}
	for len(got) < jobs {
		select {
		case ev := <-notes:
			require.NotEqual(t, w.ID, ev.ID, "the exit the client waited for was pushed: %+v", ev)
			if ev.Type == registry.EventExited {
				got[ev.ID] = ev
			}
		case <-ctx.Done():
			require.Failf(t, "exits not pushed", "%d of %d notified exits were pushed", len(got), jobs)
		}
	}
	for id, i := range want {
		ev, ok := got[id]
		require.True(t, ok, "no notification for %s", id)
		assert.True(t, ev.Notify)
		if assert.NotNil(t, ev.Status, id) {
			assert.Equal(t, i, ev.Status.Code, id)
		}
		assert.Equal(t, fmt.Sprintf("job\nresult %d", i), ev.Tail, id)
	}
	// process action=events (the other subscription) holds no repeat of
	// the waited exit either.
	var evs EventsResult
	call(t, cs, "process", map[string]any{"action": "events", "limit": 500}, &evs)
	for _, ev := range evs.Events {
		assert.False(t, ev.Type == registry.EventExited && ev.ID == w.ID, "events returned the waited exit")
	}
}
