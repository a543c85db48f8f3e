package daemon

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/registry"
)

// TestInfoDurationsOnTheWire: Info's ttl and idle_timeout are answered in
// the form requests give them, a Go duration string, not as nanoseconds
// (3600000000000, which reads back as 114 thousand years of seconds), and
// the client reads them back.
func TestInfoDurationsOnTheWire(t *testing.T) {
	c, paths := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()

	status, b := raw(t, paths.Socket, "POST", "/processes", `{"command":"sleep 60","ttl":3600,"idle_timeout":"30m"}`)
	require.Equal(t, http.StatusCreated, status, "%s", b)
	var fields map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &fields))
	assert.JSONEq(t, `"1h0m0s"`, string(fields["ttl"]))
	assert.JSONEq(t, `"30m0s"`, string(fields["idle_timeout"]))

	var in registry.Info
	require.NoError(t, json.Unmarshal(b, &in))
	status, b = raw(t, paths.Socket, "GET", "/processes/"+in.ID, "")
	require.Equal(t, http.StatusOK, status, "%s", b)
	assert.Contains(t, string(b), `"ttl":"1h0m0s"`)

	got, err := c.Get(ctx, in.ID)
	require.NoError(t, err)
	assert.Equal(t, time.Hour, got.TTL.D())
	assert.Equal(t, 30*time.Minute, got.IdleTimeout.D())
}

// TestRunIdleTimeoutHasOneField: a run's idle_timeout is Run's, with one
// field for it in RunRequest. When RunRequest had one of its own under the
// same key, the embedded StartRequest's was shadowed, so a run that set
// only StartOptions.IdleTimeout (which in process ends a quiet tree too)
// ran on through the daemon.
func TestRunIdleTimeoutHasOneField(t *testing.T) {
	c, paths := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()

	status, b := raw(t, paths.Socket, "POST", "/run", `{"command":"echo quiet now; sleep 30","idle_timeout":0.3,"grace":0.2}`)
	require.Equal(t, http.StatusOK, status, "%s", b)
	end := lastEvent[RunEnd](t, b, "end")
	assert.Equal(t, registry.StateTimedOut, end.State)
	assert.Equal(t, registry.TimedOutIdle, end.TimedOut)

	for _, opts := range []registry.RunOptions{
		{IdleTimeout: 300 * time.Millisecond},
		{StartOptions: registry.StartOptions{IdleTimeout: 300 * time.Millisecond}},
	} {
		opts.Command, opts.Grace = "echo quiet now; sleep 30", 200*time.Millisecond
		res, err := c.Run(ctx, opts)
		require.NoError(t, err)
		assert.Equal(t, registry.StateTimedOut, res.State, "%+v", opts)
		assert.Equal(t, registry.TimedOutIdle, res.TimedOut, "%+v", opts)
	}
}

// TestLabelSelectorsOnTheWire: the label= query parameter is read by the
// registry's ParseLabels, as the CLI's --label is.
func TestLabelSelectorsOnTheWire(t *testing.T) {
	_, paths := startDaemon(t)
	for _, q := range []string{"label=team", "label=%3Dweb", "label=a%3D1&label=b"} {
		status, b := raw(t, paths.Socket, "GET", "/processes?"+q, "")
		assert.Equal(t, http.StatusBadRequest, status, "%s: %s", q, b)
		assert.Contains(t, string(b), "use KEY=VALUE", q)
	}
	status, b := raw(t, paths.Socket, "GET", "/processes?label=team%3D&label=a%3Db%3Dc", "")
	assert.Equal(t, http.StatusOK, status, "an empty value, an = in a value: %s", b)
}
