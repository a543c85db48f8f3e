package mcp

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestListShowsDurationsAsGiven: a process's ttl and idle_timeout are
// listed as duration strings, the form the terminal tool reads, not as
// nanoseconds.
func TestListShowsDurationsAsGiven(t *testing.T) {
	_, cs := connect(t, nil)
	var r TerminalResult
	call(t, cs, "terminal", map[string]any{"command": "sleep 60", "background": true, "ttl": 7200, "idle_timeout": "10m"}, &r)
	res := call(t, cs, "process", map[string]any{"action": "list"}, nil)
	var list struct {
		Processes []map[string]json.RawMessage `json:"processes"`
	}
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &list))
	require.Len(t, list.Processes, 1)
	assert.JSONEq(t, `"2h0m0s"`, string(list.Processes[0]["ttl"]))
	assert.JSONEq(t, `"10m0s"`, string(list.Processes[0]["idle_timeout"]))
}
