package daemon

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
	"github.com/corralhq/corral/registry"
)

// TestRunawayOnTheWire: a process's runaway thresholds round-trip through
// start (client and raw JSON); the daemon's default applies to a process
// that gives none, and its runaway event reaches the SSE stream while
// Info says runaway.
func TestRunawayOnTheWire(t *testing.T) {
	fe := envtest.NewStatsFake(&envtest.Fake{})
	c, paths := startDaemonWith(t, func(cfg *Config) {
		cfg.Open = func(context.Context, string) (env.Environment, error) { return fe, nil }
		cfg.Runaway = &registry.RunawayOptions{Memory: 100 << 20, For: registry.Duration(time.Minute)}
	})
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	events := followEvents(t, ctx, c)

	own := registry.RunawayOptions{CPUPercent: 90, For: registry.Duration(90 * time.Second)}
	in, err := c.Start(ctx, registry.StartOptions{Command: "spin", Runaway: &own})
	require.NoError(t, err)
	require.NotNil(t, in.RunawayOptions)
	assert.Equal(t, own, *in.RunawayOptions)
	fe.Last().Exit(env.Exited(0))

	status, body := raw(t, paths.Socket, http.MethodPost, "/processes",
		`{"command": "spin", "runaway": {"cpu_percent": 150, "memory": 1073741824, "for": "2m"}}`)
	require.Equal(t, http.StatusCreated, status, "%s", body)
	var wire map[string]any
	require.NoError(t, json.Unmarshal(body, &wire))
	assert.Equal(t, map[string]any{"cpu_percent": float64(150), "memory": float64(1 << 30), "for": "2m0s"}, wire["runaway_options"])
	fe.Last().Exit(env.Exited(0))

	status, body = raw(t, paths.Socket, http.MethodPost, "/processes", `{"command": "spin", "runaway": {"cpu_percent": -1}}`)
	assert.Equal(t, http.StatusBadRequest, status, "%s", body)
	assert.Contains(t, string(body), "runaway cpu_percent -1")

	// The daemon's default: memory grown by 100M within a minute.
	in, err = c.Start(ctx, registry.StartOptions{Command: "grow"})
	require.NoError(t, err)
	assert.Nil(t, in.RunawayOptions)
	p := fe.Last()
	fe.SetStats(p, env.TreeStats{RSS: 10 << 20, Pids: 1})
	require.Eventually(t, func() bool {
		got, err := c.Get(ctx, in.ID)
		return err == nil && got.Stats != nil
	}, generous, 50*time.Millisecond, "a first sample")
	fe.SetStats(p, env.TreeStats{RSS: 500 << 20, Pids: 1})
	for {
		select {
		case ev := <-events:
			if ev.Type != registry.EventRunaway {
				continue
			}
			assert.Equal(t, in.ID, ev.ID)
			assert.Contains(t, ev.Summary, in.ID+" grew from 10M to 500M of memory in ")
			got, err := c.Get(ctx, in.ID)
			require.NoError(t, err)
			assert.True(t, got.Runaway)
			p.Exit(env.Exited(0))
			return
		case <-ctx.Done():
			require.Fail(t, "no runaway event on the stream")
		}
	}
}
