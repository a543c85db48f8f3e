package mcp

//lint:file-ignore SA1019 MCP logging notifications are deprecated only from protocol 2026-07-28, which this server does not offer (see doc.go); they are how events reach session-based clients.

import (
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/registry"
)

// TestOOMKilledReachesTheModel: an oom_killed event is always pushed, as
// an error, and a foreground run's footer names the reason.
func TestOOMKilledReachesTheModel(t *testing.T) {
	level, ok := notificationLevel(registry.Event{Type: registry.EventOOMKilled})
	assert.True(t, ok)
	assert.Equal(t, sdk.LoggingLevel("error"), level)

	code := (env.ExitStatus{Code: -1, Signal: env.SIGKILL, OOMKilled: true}).ShellCode()
	footer := terminalFooter(&TerminalResult{ID: "proc_0123456789ab", State: registry.StateExited, ExitCode: &code,
		Signal: "KILL", Reason: registry.ReasonOutOfMemory})
	assert.Equal(t, "[proc_0123456789ab exited, exit code 137, signal KILL: out of memory]", footer)
}
