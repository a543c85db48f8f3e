package dashboard

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/registry"
)

// TestSessionSaysRunaway: the page learns that a process is runaway from
// its session (Info.Runaway), and nothing of it for one that is not.
func TestSessionSaysRunaway(t *testing.T) {
	h := newHub(nil, nil, slog.New(slog.DiscardHandler))
	b, err := json.Marshal(h.session(registry.Info{ID: "proc_0123456789ab", State: registry.StateRunning, TreeRunning: true, Runaway: true}, time.Now()))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	assert.Equal(t, true, m["runaway"])

	b, err = json.Marshal(h.session(registry.Info{ID: "proc_0123456789ac", State: registry.StateRunning}, time.Now()))
	require.NoError(t, err)
	assert.NotContains(t, string(b), "runaway")
}

// TestSessionSaysWaitingInput: the page learns that a process waits for
// input, how and at which prompt, from its session (Info.WaitingInput),
// and its state text says so.
func TestSessionSaysWaitingInput(t *testing.T) {
	h := newHub(nil, nil, slog.New(slog.DiscardHandler))
	w := &registry.WaitingInput{Kind: "password", Since: time.Now(), Prompt: "Password: "}
	b, err := json.Marshal(h.session(registry.Info{ID: "proc_0123456789ab", State: registry.StateRunning, TreeRunning: true, PTY: true, WaitingInput: w}, time.Now()))
	require.NoError(t, err)
	var m struct {
		WaitingInput *registry.WaitingInput `json:"waiting_input"`
		Row          []string               `json:"row"`
	}
	require.NoError(t, json.Unmarshal(b, &m))
	require.NotNil(t, m.WaitingInput)
	assert.Equal(t, "password", m.WaitingInput.Kind)
	assert.Equal(t, "Password: ", m.WaitingInput.Prompt)
	assert.Contains(t, m.Row, "running, waiting for input (password)")
}
