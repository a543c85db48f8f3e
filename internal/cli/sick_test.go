package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/registry"
)

// A backend that does not answer, as the CLI shows it: the condition in
// STATE, "?" for ports nobody could tell, a kill that is pending, and
// doctor's line for the backend.

func TestWritePSSickBackend(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	paused := registry.Info{ID: "proc_0123456789ab", Backend: "docker://c", State: registry.StateRunning, PID: 42, TreeRunning: true,
		CreatedAt: now.Add(-5 * time.Second), Command: "npm run dev", PortsUnknown: true, BackendCondition: env.ConditionPaused, KillPending: true}
	var b strings.Builder
	writePS(&b, []registry.Info{paused}, now)
	assert.Equal(t, "ID                 BACKEND     STATE                                      AGE  PID  PORTS  COMMAND\n"+
		"proc_0123456789ab  docker://c  running (docker://c paused), kill pending  5s   42   ?      npm run dev\n", b.String())
}

func TestReportKillsUnreachable(t *testing.T) {
	results := []registry.KillResult{
		{ID: "proc_0123456789ab", State: registry.StateRunning, Unreachable: true, Detail: "container c is paused: docker unpause c"},
		{ID: "proc_ba9876543210", State: registry.StateKilled, Signal: env.SIGTERM, Ended: 1},
	}
	var out bytes.Buffer
	err := reportKills(&out, results, nil, false)
	assert.Equal(t, "proc_0123456789ab NOT killed, unreachable: container c is paused: docker unpause c; the kill is pending and runs when the backend answers again\n"+
		"proc_ba9876543210 killed: SIGTERM; 1 process ended (killed)\n", out.String())
	var ee *exitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, exitCorralError, ee.code)
	assert.Contains(t, ee.msg, "1 process not killed")
	assert.Contains(t, ee.msg, "the kill is pending")
	assert.Less(t, len(ee.msg), 400)
}
