package mcp

import (
	"context"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/registry"
)

// TestKillEscalateAndItsOldName: escalate=false never sends SIGKILL;
// force, its old name, still means what agents meant by it (false: never
// SIGKILL; true: the default, never SIGKILL at once); the two disagreeing
// is refused; signal KILL is SIGKILL at once.
func TestKillEscalateAndItsOldName(t *testing.T) {
	_, cs := connect(t, nil)
	start := func() string {
		t.Helper()
		var r TerminalResult
		call(t, cs, "terminal", map[string]any{"command": "trap '' TERM; echo ready; sleep 60", "background": true, "ready_pattern": "ready"}, &r)
		var w PollResult
		call(t, cs, "process", map[string]any{"action": "wait", "id": r.ID, "ready": true}, &w)
		require.False(t, w.ReadyAt.IsZero(), "%+v", w)
		return r.ID
	}
	id := start()
	for _, args := range []map[string]any{{"escalate": false}, {"force": false}, {"escalate": false, "force": false}} {
		args["action"], args["id"], args["grace"] = "kill", id, 0.2
		var res registry.KillResult
		call(t, cs, "process", args, &res)
		assert.True(t, res.StillRunning, "%v: %+v", args, res)
		assert.False(t, res.Escalated, "%v", args)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "process", Arguments: map[string]any{"action": "kill", "id": id, "escalate": false, "force": true}})
	require.NoError(t, err)
	require.True(t, res.IsError)
	assert.Contains(t, res.Content[0].(*sdk.TextContent).Text, "contradict")

	// force=true is the default kill: TERM first (ignored here), then
	// SIGKILL after the grace.
	var kr registry.KillResult
	call(t, cs, "process", map[string]any{"action": "kill", "id": id, "grace": 0.2, "force": true}, &kr)
	assert.Equal(t, env.SIGTERM, kr.Signal)
	assert.True(t, kr.Escalated)
	assert.Equal(t, registry.StateKilled, kr.State)

	id = start()
	call(t, cs, "process", map[string]any{"action": "kill", "id": id, "signal": "KILL", "grace": 3600}, &kr)
	assert.Equal(t, env.SIGKILL, kr.Signal)
	assert.Equal(t, registry.StateKilled, kr.State)
}

// TestKillNegativeGraceRefusedByTheRegistry: the tool passes grace on; the
// registry's one check of a kill's options refuses a negative one, in
// words that name it.
func TestKillNegativeGraceRefusedByTheRegistry(t *testing.T) {
	_, cs := connect(t, nil)
	var r TerminalResult
	call(t, cs, "terminal", map[string]any{"command": "sleep 60", "background": true}, &r)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "process", Arguments: map[string]any{"action": "kill", "id": r.ID, "grace": "-1s"}})
	require.NoError(t, err)
	require.True(t, res.IsError)
	text := res.Content[0].(*sdk.TextContent).Text
	assert.Contains(t, text, "negative grace")
	assert.NotContains(t, text, "registry: ")
	var p PollResult
	call(t, cs, "process", map[string]any{"action": "poll", "id": r.ID}, &p)
	assert.Equal(t, registry.StateRunning, p.State, "a refused kill sends nothing")
}
