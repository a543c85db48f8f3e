package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
	"github.com/corralhq/corral/env/local"
	"github.com/corralhq/corral/registry"
)

// TestStatsRoute: GET /v1/processes/{id}/stats answers the registry's
// samples of a backend that measures (through the daemon's wrapper of
// its environments), says why there are none on one that cannot, and
// maps an unknown ID to ErrNotFound.
func TestStatsRoute(t *testing.T) {
	measured := envtest.NewStatsFake(&envtest.Fake{})
	plain := &envtest.Fake{}
	c, _ := startDaemonWith(t, func(cfg *Config) {
		envDir := t.TempDir()
		cfg.Open = func(ctx context.Context, target string) (env.Environment, error) {
			switch target {
			case "measured":
				return measured, nil
			case "plain":
				return plain, nil
			case "local":
				return local.New(local.Options{StateDir: envDir, Logger: slog.New(slog.DiscardHandler)})
			}
			return nil, fmt.Errorf("unknown backend %q", target)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()

	in, err := c.Start(ctx, registry.StartOptions{Backend: "measured", Command: "serve"})
	require.NoError(t, err)
	measured.SetStats(measured.Last(), env.TreeStats{CPU: 3 * time.Second, RSS: 48 << 20, Pids: 2, ReadBytes: 7})
	var rep registry.StatsReport
	require.Eventually(t, func() bool {
		rep, err = c.Stats(ctx, in.ID)
		return err != nil || rep.Stats != nil
	}, generous, 20*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, in.ID, rep.ID)
	assert.Equal(t, int64(48<<20), rep.Stats.RSSBytes)
	assert.Equal(t, 3.0, rep.Stats.CPUSeconds)
	assert.Equal(t, 2, rep.Stats.Pids)
	assert.Equal(t, int64(7), rep.Stats.ReadBytes)
	assert.NotEmpty(t, rep.History)
	assert.Empty(t, rep.Unsupported)
	got, err := c.Get(ctx, in.ID)
	require.NoError(t, err)
	require.NotNil(t, got.Stats, "Info carries the last sample")
	assert.Equal(t, int64(48<<20), got.Stats.RSSBytes)

	other, err := c.Start(ctx, registry.StartOptions{Backend: "plain", Command: "serve"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		rep, err = c.Stats(ctx, other.ID)
		return err != nil || rep.Unsupported != ""
	}, generous, 20*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, "backend plain cannot measure its processes", rep.Unsupported)
	assert.Nil(t, rep.Stats)

	_, err = c.Stats(ctx, "proc_000000000000")
	require.ErrorIs(t, err, registry.ErrNotFound)
}
