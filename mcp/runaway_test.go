package mcp

//lint:file-ignore SA1019 MCP logging notifications are deprecated only from protocol 2026-07-28, which this server does not offer (see doc.go); they are how events reach session-based clients.

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
	"github.com/corralhq/corral/registry"
)

// TestTerminalRunaway: terminal's runaway_* arguments reach the process as
// its runaway thresholds; bad values are refused naming the argument, and
// nothing starts then.
func TestTerminalRunaway(t *testing.T) {
	fe := &envtest.Fake{}
	_, _, cs := connectTo(t, func(context.Context, string) (env.Environment, error) { return fe, nil },
		nil, slog.New(slog.DiscardHandler))

	var res TerminalResult
	call(t, cs, "terminal", map[string]any{"command": "spin", "background": true,
		"runaway_cpu": 90, "runaway_memory": "4G", "runaway_for": "90s"}, &res)
	var list ListResult
	call(t, cs, "process", map[string]any{"action": "list"}, &list)
	require.Len(t, list.Processes, 1)
	require.NotNil(t, list.Processes[0].Info.RunawayOptions)
	assert.Equal(t, registry.RunawayOptions{CPUPercent: 90, Memory: 4 << 30, For: registry.Duration(90 * time.Second)},
		*list.Processes[0].Info.RunawayOptions)

	call(t, cs, "terminal", map[string]any{"command": "plain", "background": true}, &res)
	call(t, cs, "process", map[string]any{"action": "list"}, &list)
	for _, p := range list.Processes {
		if p.Info.ID == res.ID {
			assert.Nil(t, p.Info.RunawayOptions, "none given, none kept")
		}
	}

	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"runaway_cpu": 0}, `"runaway_cpu" 0: give a percent of a core above 0`},
		{map[string]any{"runaway_cpu": -5}, `"runaway_cpu" -5`},
		{map[string]any{"runaway_memory": "lots"}, `"runaway_memory" "lots" is not a size`},
		{map[string]any{"runaway_memory": strings.Repeat("9x", 1000)}, `"runaway_memory" "9x9x`},
		{map[string]any{"runaway_for": "2m"}, `"runaway_for" is the window of runaway_cpu or runaway_memory`},
		{map[string]any{"runaway_cpu": 90, "runaway_for": "10ms"}, `"runaway_for" 10ms: give at least 1s`},
	} {
		args := map[string]any{"command": "spin", "background": true}
		for k, v := range tc.args {
			args[k] = v
		}
		msg := callErr(t, cs, "terminal", args)
		assert.Contains(t, msg, tc.want, "%v", tc.args)
		assert.Less(t, len(msg), 200, "%v: a huge value is not echoed", tc.args)
	}
	assert.Len(t, fe.Procs(), 2, "nothing started for a bad value")
}

// TestRunawayReachesTheModel: a runaway event is pushed as a warning.
func TestRunawayReachesTheModel(t *testing.T) {
	level, ok := notificationLevel(registry.Event{Type: registry.EventRunaway})
	assert.True(t, ok)
	assert.Equal(t, sdk.LoggingLevel("warning"), level)
}
