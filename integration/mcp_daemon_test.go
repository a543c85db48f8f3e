package integration

//lint:file-ignore SA1019 MCP logging notifications are how corral tells a session-based client of events (see mcp/doc.go); the test listens to them.

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/registry"
)

// corral mcp runs its processes in the daemon (the package's shared one,
// see TestMain): a person sees and kills what an agent started, and what
// the agent asked to persist outlives its session.
func TestMCPThroughTheDaemon(t *testing.T) {
	bin := mcpBinary(t)

	t.Run("ps lists it; corral kill ends it and the client is told", func(t *testing.T) {
		notes := newMCPNotes()
		cs := mcpConnect(t, bin, notes)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}))
		m := cliSleepMarker(t)
		var r mcpTerminalResult
		mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{"command": "sleep " + m, "background": true, "notify_on_complete": true}, &r))

		listed := findListed(t, bin, m)
		require.NotNil(t, listed, "corral ps in another process does not list the agent's process")
		assert.Equal(t, r.ID, listed.ID)
		assert.Equal(t, "mcp", listed.Labels["via"])
		session := listed.Labels["mcp-session"]
		require.NotEmpty(t, session, "no session label")
		byLabel := runCorral(t, bin, nil, "ps", "--label", "mcp-session="+session)
		assert.Contains(t, byLabel.stdout, r.ID, "corral ps --label finds the session's processes")

		kill := runCorral(t, bin, nil, "kill", r.ID)
		require.Equal(t, 0, kill.code, "corral kill: %s", kill.stderr)
		exit := notes.await(t, func(ev map[string]any) bool { return ev["type"] == "exited" && ev["id"] == r.ID })
		assert.Equal(t, "killed", exit["state"])
		cliRequireMarkerGone(t, m)
	})

	t.Run("persist outlives the session; the default does not", func(t *testing.T) {
		kept, dropped := cliSleepMarker(t), cliSleepMarker(t)
		cs := mcpConnect(t, bin, nil)
		var persisted, plain mcpTerminalResult
		mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{"command": "sleep " + kept, "background": true, "persist": true}, &persisted))
		mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{"command": "sleep " + dropped, "background": true}, &plain))
		cliRequireMarkerRunning(t, kept, 1)
		cliRequireMarkerRunning(t, dropped, 1)
		require.NoError(t, cs.Close()) // the client exits: corral mcp ends

		cliRequireMarkerGone(t, dropped)
		require.Eventually(t, func() bool {
			in := findListed(t, bin, dropped)
			return in != nil && in.State == registry.StateKilled
		}, time.Minute, 50*time.Millisecond, "the session's default process was not killed")
		in := findListed(t, bin, kept)
		require.NotNil(t, in)
		assert.Equal(t, registry.StateRunning, in.State, "a persisted process outlives its session")
		assert.NotEmpty(t, cliMarkerPIDs(t, kept))

		// A later session takes it over: lists, polls and kills it.
		later := mcpConnect(t, bin, nil)
		var list struct {
			Processes []struct {
				ID     string            `json:"id"`
				State  string            `json:"state"`
				Labels map[string]string `json:"labels"`
			} `json:"processes"`
		}
		mcpOK(t, mcpCall(t, later, "process", map[string]any{"action": "list", "state": []string{"running"}, "labels": map[string]string{"mcp-persist": "1"}}, &list))
		var found bool
		for _, p := range list.Processes {
			found = found || p.ID == persisted.ID
			assert.Equal(t, "running", p.State, "list filtered by state")
		}
		require.True(t, found, "a later session does not list the persisted process: %+v", list)
		mcpOK(t, mcpCall(t, later, "process", map[string]any{"action": "kill", "id": persisted.ID}, nil))
		cliRequireMarkerGone(t, kept)
		mcpOK(t, mcpCall(t, later, "process", map[string]any{"action": "remove", "id": persisted.ID}, nil))
		assert.Nil(t, findListed(t, bin, kept), "removed processes are forgotten")
	})

	t.Run("agent defaults: no pager, unbuffered Python, the server's directory", func(t *testing.T) {
		cs := mcpConnect(t, bin, nil)
		var r mcpTerminalResult
		mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{"command": `echo "$PAGER $GIT_PAGER $PYTHONUNBUFFERED"; pwd`}, &r))
		lines := strings.Split(strings.TrimSpace(r.Output), "\n")
		require.Len(t, lines, 2, "output %q", r.Output)
		assert.Equal(t, "cat cat 1", lines[0])
		wd, err := filepath.Abs(".")
		require.NoError(t, err)
		assert.Equal(t, wd, lines[1], "commands run where corral mcp runs, not where the daemon does")
		mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{"command": `echo "$PAGER"`, "env": map[string]string{"PAGER": "less"}}, &r))
		assert.Equal(t, "less\n", r.Output, "the call's env overrides the defaults")
	})
}
