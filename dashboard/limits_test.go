package dashboard

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/registry"
)

// TestSessionSaysLimits: the detail view gets a process's limits in the
// flags' words, and nothing for a process without; the reason of an OOM
// kill under a limit travels as the registry wrote it.
func TestSessionSaysLimits(t *testing.T) {
	h := newHub(nil, nil, slog.New(slog.DiscardHandler))
	in := registry.Info{ID: "proc_0123456789ab", State: registry.StateExited, Limits: &env.Limits{Memory: 100 << 20, Pids: 64},
		Status: &env.ExitStatus{Code: -1, Signal: env.SIGKILL, OOMKilled: true}, Reason: "out of memory (limit 100M)"}
	b, err := json.Marshal(h.session(in, time.Now()))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	assert.Equal(t, "memory 100M, pids 64", m["limits_text"])
	assert.Equal(t, "out of memory (limit 100M)", m["reason"])

	b, err = json.Marshal(h.session(registry.Info{ID: "proc_0123456789ac", State: registry.StateRunning}, time.Now()))
	require.NoError(t, err)
	assert.NotContains(t, string(b), "limits")
}
