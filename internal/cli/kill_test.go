package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/registry"
)

// TestKillFlags: --escalate=false signals without SIGKILL, --no-escalate
// is its old name, --force is SIGKILL at once (with --all too, which used
// to drop it), and what contradicts itself is a usage error that the
// registry, not the CLI, finds.
func TestKillFlags(t *testing.T) {
	startTestDaemon(t)
	start := func() string {
		t.Helper()
		id := strings.TrimSpace(mustCorral(t, "start", "--label", "t=killflags", "--ready-pattern", "ready", "--", "trap '' TERM HUP; echo ready; sleep 60"))
		mustCorral(t, "wait", "--ready", "--timeout", "30s", id)
		return id
	}
	kill := func(args ...string) registry.KillResult {
		t.Helper()
		var res []registry.KillResult
		require.NoError(t, json.Unmarshal([]byte(mustCorral(t, append([]string{"kill", "--json"}, args...)...)), &res))
		require.Len(t, res, 1)
		return res[0]
	}
	id := start()
	for _, flag := range []string{"--escalate=false", "--no-escalate"} {
		res := kill("-s", "HUP", "--grace", "200ms", flag, id)
		assert.True(t, res.StillRunning, "%s: %+v", flag, res)
		assert.False(t, res.Escalated, flag)
	}
	for _, args := range [][]string{
		{"--force", "--escalate=false", id},
		{"--force", "--no-escalate", id},
		{"--escalate=true", "--no-escalate", id},
		{"--grace=-1s", id},
		{"--all", "--force", "--escalate=false"},
	} {
		code, out, errOut := corral(t, "", append([]string{"kill"}, args...)...)
		assert.Equal(t, exitUsage, code, "%v: stdout %q stderr %q", args, out, errOut)
	}
	// Options the registry refuses are refused once, not once per ID.
	other := start()
	code, out, errOut := corral(t, "", "kill", "--force", "--escalate=false", id, other)
	assert.Equal(t, exitUsage, code, "stdout %q", out)
	assert.Equal(t, 1, strings.Count(errOut, "contradict"), "%q", errOut)

	var all []registry.KillResult
	require.NoError(t, json.Unmarshal([]byte(mustCorral(t, "kill", "--json", "--all", "--label", "t=killflags", "--force", "--grace", "1h")), &all))
	require.Len(t, all, 2)
	for _, res := range all {
		assert.Equal(t, "KILL", string(res.Signal))
		assert.Equal(t, registry.StateKilled, res.State)
	}
}
