package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
	"github.com/corralhq/corral/registry"
)

// TestProcessCost: list and poll put the cost of a measured tree at the
// top (cpu_percent, rss_bytes, peak_rss_bytes, pids), once, and leave it
// out for a process not measured.
func TestProcessCost(t *testing.T) {
	fe := envtest.NewStatsFake(&envtest.Fake{})
	reg, _, cs := connectTo(t, func(context.Context, string) (env.Environment, error) { return fe, nil },
		nil, slog.New(slog.DiscardHandler))

	// Not measured (the backend's calls fail): nothing of the cost is
	// said.
	fe.SetStatsError(errors.New("the backend is busy"))
	measured, err := reg.Start(context.Background(), registry.StartOptions{Command: "serve"})
	require.NoError(t, err)
	fe.SetStats(fe.Last(), env.TreeStats{CPU: time.Second, RSS: 64 << 20, Pids: 2})
	raw := rawCall(t, cs, "process", map[string]any{"action": "poll", "id": measured.ID})
	for _, k := range []string{"cpu_percent", "rss_bytes", "peak_rss_bytes", "pids", "stats"} {
		assert.NotContains(t, raw, k)
	}
	fe.SetStatsError(nil)

	require.Eventually(t, func() bool {
		got, err := reg.Get(context.Background(), measured.ID)
		return err == nil && got.Stats != nil
	}, 30*time.Second, 20*time.Millisecond, "the sampler measures the tree")

	raw = rawCall(t, cs, "process", map[string]any{"action": "poll", "id": measured.ID})
	assert.Equal(t, float64(64<<20), raw["rss_bytes"])
	assert.Equal(t, float64(64<<20), raw["peak_rss_bytes"])
	assert.Equal(t, float64(2), raw["pids"])
	assert.Contains(t, raw, "cpu_percent", "0 is a figure, not an absence")
	assert.NotContains(t, raw, "stats", "each figure once")

	var list ListResult
	call(t, cs, "process", map[string]any{"action": "list"}, &list)
	require.Len(t, list.Processes, 1)
	lp := list.Processes[0]
	require.NotNil(t, lp.RSSBytes)
	assert.Equal(t, int64(64<<20), *lp.RSSBytes)
	require.NotNil(t, lp.Pids)
	assert.Equal(t, 2, *lp.Pids)
	assert.NotNil(t, lp.CPUPercent)
	assert.Nil(t, lp.Stats)
}

// rawCall calls tool and returns its structured result as a JSON object.
func rawCall(t *testing.T, cs *sdk.ClientSession, tool string, args map[string]any) map[string]any {
	t.Helper()
	var m map[string]any
	res := call(t, cs, tool, args, nil)
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}
