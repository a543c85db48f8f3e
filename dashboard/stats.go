package dashboard

import (
	"context"
	"fmt"
	"time"

	"github.com/corralhq/corral/registry"
)

// The page draws a sparkline of CPU and of memory beside each visible
// running process, from the registry's recent samples. It asks for them
// itself ("stats_history", every few seconds, for the rows on screen)
// rather than the hub pushing them: a sample is no state change, and only
// the page knows which rows are seen.

// statsHistoryMax bounds the processes of one "stats_history" request:
// more rows than that are never on one screen.
const statsHistoryMax = 100

// sparkPoints bounds the samples sent per process: a sparkline is a few
// dozen pixels wide, and ten minutes at one sample a second are 600.
const sparkPoints = 60

// statsHistoryTimeout bounds one request (Registry.Stats asks no backend;
// a remote Service might).
const statsHistoryTimeout = 5 * time.Second

// statsHistoryMsg answers "stats_history": each process's samples, oldest
// first, at most sparkPoints of them. A process without samples (not
// measured, unknown, removed) is absent.
type statsHistoryMsg struct {
	Type      string                            `json:"type"` // "stats_history"
	Histories map[string][]registry.StatsSample `json:"histories"`
}

// statsHistory answers a "stats_history" request for ids.
func (c *conn) statsHistory(ctx context.Context, ids []string) {
	ctx, cancel := context.WithTimeout(ctx, statsHistoryTimeout)
	defer cancel()
	msg := statsHistoryMsg{Type: "stats_history", Histories: make(map[string][]registry.StatsSample, len(ids))}
	for _, id := range ids {
		rep, err := c.s.cfg.Service.Stats(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			continue // gone since the page listed it: nothing to draw
		}
		if len(rep.History) > 0 {
			msg.Histories[id] = sparkline(rep.History, sparkPoints)
		}
	}
	c.send(msg)
}

// checkStatsHistory says what is wrong with a "stats_history" request, or
// "" when nothing is.
func checkStatsHistory(ids []string) string {
	switch {
	case len(ids) == 0:
		return "stats_history needs sessionIds: the processes whose samples to send"
	case len(ids) > statsHistoryMax:
		return fmt.Sprintf("stats_history takes at most %d sessionIds: ask for the rows on screen", statsHistoryMax)
	}
	return ""
}

// sparkline reduces h (oldest first) to at most n samples: consecutive
// runs of samples, each kept as its largest CPU and memory at the time of
// its last sample, so that a short spike still shows.
func sparkline(h []registry.StatsSample, n int) []registry.StatsSample {
	if len(h) <= n {
		return h
	}
	out := make([]registry.StatsSample, 0, n)
	for i := range n {
		run := h[i*len(h)/n : (i+1)*len(h)/n]
		p := run[len(run)-1]
		for _, s := range run {
			p.CPUPercent = max(p.CPUPercent, s.CPUPercent)
			p.RSSBytes = max(p.RSSBytes, s.RSSBytes)
			p.Pids = max(p.Pids, s.Pids)
		}
		out = append(out, p)
	}
	return out
}
