package integration

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// topRow is what corral top --once --json says of a process.
type topRow struct {
	ID           string   `json:"id"`
	CPUPercent   *float64 `json:"cpu_percent"`
	RSSBytes     *int64   `json:"rss_bytes"`
	PeakRSSBytes *int64   `json:"peak_rss_bytes"`
	Pids         *int     `json:"pids"`
	State        string   `json:"state"`
}

// TestTopThroughTheCLI: corral top on the local backend puts a busy loop
// first by CPU, beside a sleep, and a tree holding 64 MiB first by memory;
// its text frame has the columns.
func TestTopThroughTheCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the corral binary")
	}
	bin := buildCorral(t)
	h := newDaemonHome(t, bin)
	idle := strings.TrimSpace(h.mustRun("start", "--", "sleep 600"))
	busy := strings.TrimSpace(h.mustRun("start", "--", "while :; do :; done"))
	defer h.mustRun("kill", "--force", idle, busy)

	rows := waitTop(t, h, "cpu", func(rows []topRow) bool {
		return len(rows) >= 2 && rows[0].ID == busy && rows[0].CPUPercent != nil && *rows[0].CPUPercent > 0
	})
	assert.Equal(t, "running", rows[0].State)
	require.NotNil(t, rows[0].Pids)
	assert.GreaterOrEqual(t, *rows[0].Pids, 1)

	mem := strings.TrimSpace(h.mustRun("start", "--", `v=$(head -c 67108864 /dev/zero | tr '\0' a); sleep 600; : "${#v}"`))
	defer h.mustRun("kill", "--force", mem)
	rows = waitTop(t, h, "mem", func(rows []topRow) bool {
		return len(rows) >= 3 && rows[0].ID == mem && rows[0].RSSBytes != nil && *rows[0].RSSBytes >= 60<<20
	})
	require.NotNil(t, rows[0].PeakRSSBytes)
	assert.GreaterOrEqual(t, *rows[0].PeakRSSBytes, *rows[0].RSSBytes)

	frame := h.mustRun("top", "--once", "--sort", "mem")
	lines := strings.Split(strings.TrimSpace(frame), "\n")
	require.GreaterOrEqual(t, len(lines), 4, frame)
	assert.Equal(t, []string{"ID", "NAME", "BACKEND", "CPU%", "MEM", "PEAK", "PIDS", "LIMITS", "STATE", "COMMAND"}, strings.Fields(lines[0]))
	assert.True(t, strings.HasPrefix(lines[1], mem+" "), "the 64 MiB tree first:\n%s", frame)
	assert.NotContains(t, frame, "\x1b", "no escape sequences on a pipe")
}

// waitTop polls corral top --once --json --sort by until ok holds for
// its rows (20 s at most, as waitStats: a loaded machine is given room).
func waitTop(t *testing.T, h *daemonHome, by string, ok func([]topRow) bool) []topRow {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for polls := 1; ; polls++ {
		out := h.mustRun("top", "--once", "--json", "--sort", by)
		var rows []topRow
		require.NoError(t, json.Unmarshal([]byte(out), &rows), "corral top --once --json: %s", out)
		if ok(rows) {
			t.Logf("--sort %s: there after %d polls", by, polls)
			return rows
		}
		require.Falsef(t, time.Now().After(deadline), "corral top --sort %s never got there after %d polls: %s", by, polls, out)
		time.Sleep(200 * time.Millisecond)
	}
}
