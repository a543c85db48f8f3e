package dashboard

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/registry"
)

// TestStatsHistory: the page's "stats_history" request gets the samples
// of the processes it names (absent for an unknown one), and a request
// without names or with too many gets an error, the connection open.
func TestStatsHistory(t *testing.T) {
	f := newFixture(t)
	c := f.connect()
	in, err := f.reg.Start(ctxT(t), registry.StartOptions{Command: "while :; do :; done"})
	require.NoError(t, err)
	defer func() { _, _ = f.reg.Kill(ctxT(t), in.ID, registry.KillOptions{Force: true}) }()

	var hist []any
	deadline := time.Now().Add(generous)
	for len(hist) < 2 {
		require.False(t, time.Now().After(deadline), "no two samples of %s", in.ID)
		time.Sleep(300 * time.Millisecond)
		c.write(map[string]any{"type": "stats_history", "sessionIds": []string{in.ID, "proc_000000000000"}})
		m := c.next(ofType("stats_history"))
		histories := m["histories"].(map[string]any)
		assert.NotContains(t, histories, "proc_000000000000", "an unknown process has no samples")
		hist, _ = histories[in.ID].([]any)
	}
	last := hist[len(hist)-1].(map[string]any)
	for _, k := range []string{"at", "cpu_percent", "rss_bytes", "pids"} {
		assert.Contains(t, last, k)
	}
	assert.Positive(t, last["rss_bytes"])

	c.write(map[string]any{"type": "stats_history"})
	assert.Contains(t, c.next(ofType("error"))["message"], "stats_history needs sessionIds")
	many := make([]string, statsHistoryMax+1)
	for i := range many {
		many[i] = fmt.Sprintf("proc_%012d", i)
	}
	c.write(map[string]any{"type": "stats_history", "sessionIds": many})
	assert.Contains(t, c.next(ofType("error"))["message"], "at most 100")
	c.write(map[string]any{"type": "stats_history", "sessionIds": []string{"proc_000000000000"}})
	assert.Empty(t, c.next(ofType("stats_history"))["histories"], "still open, and nothing for an unknown process")
}

// TestSparkline: a long history is cut to n points that keep each run's
// peak, the newest last; a short one is kept whole.
func TestSparkline(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h := make([]registry.StatsSample, 600)
	for i := range h {
		h[i] = registry.StatsSample{At: at.Add(time.Duration(i) * time.Second), CPUPercent: 1, RSSBytes: 100, Pids: 1}
	}
	h[123].CPUPercent = 250 // a one-sample spike
	h[400].RSSBytes = 9000

	got := sparkline(h, 60)
	require.Len(t, got, 60)
	assert.Equal(t, h[599].At, got[59].At, "the newest sample last")
	assert.Equal(t, h[9].At, got[0].At)
	assert.Equal(t, 250.0, got[12].CPUPercent, "the spike in samples 120-129")
	assert.Equal(t, int64(9000), got[40].RSSBytes)
	for i, p := range got {
		if i != 12 {
			assert.Equal(t, 1.0, p.CPUPercent, "point %d", i)
		}
		if i > 0 {
			assert.True(t, p.At.After(got[i-1].At), "in order")
		}
	}
	assert.Equal(t, h[:5], sparkline(h[:5], 60))
}
