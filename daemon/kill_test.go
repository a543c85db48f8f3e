package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/registry"
)

// TestKillWordsOnTheWire: force is SIGKILL now, escalate (default true)
// is SIGKILL after the grace, no_escalate is still read as the old name of
// escalate=false, and the registry refuses what contradicts itself.
func TestKillWordsOnTheWire(t *testing.T) {
	c, paths := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	label := map[string]string{"t": "kill-words"}
	start := func() registry.Info {
		t.Helper()
		in, err := c.Start(ctx, registry.StartOptions{Command: `trap '' TERM HUP; echo ready; sleep 60`, Labels: label})
		require.NoError(t, err)
		_, err = c.Follow(ctx, in.ID, 0, func(ch OutputChunk) error {
			if string(ch.Data) == "ready\n" {
				return errReady
			}
			return nil
		})
		require.ErrorIs(t, err, errReady)
		return in
	}
	in := start()

	for _, body := range []string{`{"signal":"HUP","grace":0.2,"escalate":false}`, `{"signal":"HUP","grace":0.2,"no_escalate":true}`} {
		status, b := raw(t, paths.Socket, "POST", "/processes/"+in.ID+"/kill", body)
		require.Equal(t, http.StatusOK, status, "%s: %s", body, b)
		var res registry.KillResult
		require.NoError(t, json.Unmarshal(b, &res))
		assert.True(t, res.StillRunning, "%s: nothing escalates: %s", body, b)
		assert.False(t, res.Escalated, body)
	}
	for _, body := range []string{`{"escalate":true,"no_escalate":true}`, `{"force":true,"escalate":false}`, `{"force":true,"no_escalate":true}`} {
		for _, path := range []string{"/processes/" + in.ID + "/kill", "/kill"} {
			status, b := raw(t, paths.Socket, "POST", path, body)
			var eb ErrorBody
			require.NoError(t, json.Unmarshal(b, &eb), "%s %s: %s", path, body, b)
			assert.Equal(t, http.StatusBadRequest, status, "%s %s: %s", path, body, b)
			assert.Equal(t, CodeInvalid, eb.Code, "%s %s", path, body)
		}
	}

	// The client says the same through KillOptions.
	res, err := c.Kill(ctx, in.ID, registry.KillOptions{Signal: env.SIGHUP, Grace: 200 * time.Millisecond, Escalate: new(false)})
	require.NoError(t, err)
	assert.True(t, res.StillRunning)
	_, err = c.Kill(ctx, in.ID, registry.KillOptions{Force: true, Escalate: new(false)})
	require.ErrorIs(t, err, registry.ErrInvalidOptions)

	// force through KillAll: SIGKILL first, so an hour's grace is never
	// waited.
	results, err := c.KillAll(ctx, registry.KillAllOptions{Labels: label, Grace: time.Hour, Force: true})
	require.NoError(t, err)
	require.Len(t, results, 1)
	assert.Equal(t, env.SIGKILL, results[0].Signal)
	assert.Equal(t, registry.StateKilled, results[0].State)
}

// errReady stops a Follow at the line a test waits for.
var errReady = errors.New("ready")
