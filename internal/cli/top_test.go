package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/registry"
)

// topFixture: a busy process, a large quiet one, one not measured yet and
// one whose tree has ended (its last figures are not live).
func topFixture() []registry.Info {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return []registry.Info{
		{ID: "proc_unmeasured", Backend: "local", State: registry.StateRunning, TreeRunning: true,
			Command: "sleep 600"},
		{ID: "proc_big", Name: "db", Backend: "local", State: registry.StateRunning, TreeRunning: true,
			Command: "v=$(head -c 67108864 /dev/zero); sleep 600",
			Limits:  &env.Limits{Memory: 1 << 30, Pids: 512},
			Stats:   &registry.Stats{CPUPercent: 0.2, RSSBytes: 300 << 20, PeakRSSBytes: 340 << 20, Pids: 2, SampledAt: at}},
		{ID: "proc_busy", Name: "loop", Backend: "docker://web", State: registry.StateRunning, TreeRunning: true,
			Command: "while :; do :; done",
			Stats:   &registry.Stats{CPUPercent: 97.4, RSSBytes: 2 << 20, PeakRSSBytes: 2 << 20, Pids: 1, SampledAt: at}},
		{ID: "proc_ended", Backend: "local", State: registry.StateExited, TreeRunning: false,
			Command: "true",
			Stats:   &registry.Stats{CPUPercent: 500, RSSBytes: 4 << 30, PeakRSSBytes: 4 << 30, Pids: 1, SampledAt: at}},
	}
}

func topIDs(list []registry.Info) []string {
	ids := make([]string, len(list))
	for i, in := range list {
		ids[i] = in.ID
	}
	return ids
}

// TestSortTop: by CPU and by memory, the largest first; a process without
// live figures last whatever its last sample said, ties by ID.
func TestSortTop(t *testing.T) {
	list := topFixture()
	sortTop(list, "cpu")
	assert.Equal(t, []string{"proc_busy", "proc_big", "proc_ended", "proc_unmeasured"}, topIDs(list))
	sortTop(list, "mem")
	assert.Equal(t, []string{"proc_big", "proc_busy", "proc_ended", "proc_unmeasured"}, topIDs(list))

	// Equal CPU: the memory decides, then the ID.
	a := registry.Info{ID: "b", TreeRunning: true, Stats: &registry.Stats{CPUPercent: 10, RSSBytes: 1}}
	b := registry.Info{ID: "c", TreeRunning: true, Stats: &registry.Stats{CPUPercent: 10, RSSBytes: 5}}
	c := registry.Info{ID: "a", TreeRunning: true, Stats: &registry.Stats{CPUPercent: 10, RSSBytes: 1}}
	list = []registry.Info{a, b, c}
	sortTop(list, "cpu")
	assert.Equal(t, []string{"c", "a", "b"}, topIDs(list))
}

// TestWriteTop: the table's columns and texts, "-" for what a process
// does not have, and the width clipping each line.
func TestWriteTop(t *testing.T) {
	list := topFixture()
	sortTop(list, "cpu")
	var out bytes.Buffer
	writeTop(&out, list, 0)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	require.Len(t, lines, 5, out.String())
	assert.Equal(t, []string{"ID", "NAME", "BACKEND", "CPU%", "MEM", "PEAK", "PIDS", "LIMITS", "STATE", "COMMAND"}, strings.Fields(lines[0]))
	assert.Equal(t, []string{"proc_busy", "loop", "docker://web", "97%", "2M", "2M", "1", "-", "running",
		"while", ":;", "do", ":;", "done"}, strings.Fields(lines[1]))
	assert.Equal(t, []string{"proc_big", "db", "local", "0.2%", "300M", "340M", "2", "memory", "1G,", "pids", "512", "running"},
		strings.Fields(lines[2])[:12])
	assert.Equal(t, []string{"proc_ended", "-", "local", "-", "-", "-", "-", "-"}, strings.Fields(lines[3])[:8])
	assert.Equal(t, []string{"proc_unmeasured", "-", "local", "-", "-", "-", "-", "-", "running", "sleep", "600"}, strings.Fields(lines[4]))
	// The columns line up: CPU% starts at the same place on every line.
	col := strings.Index(lines[0], "CPU%")
	assert.Equal(t, "97%", strings.Fields(lines[1][col:])[0])
	assert.Equal(t, "-", strings.Fields(lines[4][col:])[0])

	// A 50-column terminal: each line cut to 50, the cut marked.
	out.Reset()
	writeTop(&out, list, 50)
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		assert.LessOrEqual(t, len([]rune(l)), 50, l)
		assert.True(t, strings.HasSuffix(l, "…"), "clipped: %q", l)
	}
	// Without a width the command is clipped as ps clips it.
	long := registry.Info{ID: "proc_long", Backend: "local", State: registry.StateRunning, Command: "echo " + strings.Repeat("x", 200)}
	out.Reset()
	writeTop(&out, []registry.Info{long}, 0)
	assert.Contains(t, out.String(), "echo "+strings.Repeat("x", 54)+"…\n")
}

// TestTopRows: --json's rows carry the figures under the names the API
// uses, and none for a process without live figures.
func TestTopRows(t *testing.T) {
	list := topFixture()
	sortTop(list, "mem")
	b, err := json.Marshal(topRows(list))
	require.NoError(t, err)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal(b, &rows))
	require.Len(t, rows, 4)
	assert.Equal(t, "proc_big", rows[0]["id"])
	assert.Equal(t, float64(300<<20), rows[0]["rss_bytes"])
	assert.Equal(t, float64(340<<20), rows[0]["peak_rss_bytes"])
	assert.Equal(t, 0.2, rows[0]["cpu_percent"])
	assert.Equal(t, float64(2), rows[0]["pids"])
	assert.Equal(t, map[string]any{"memory": float64(1 << 30), "pids": float64(512)}, rows[0]["limits"])
	assert.Equal(t, "running", rows[0]["state"])
	for _, r := range rows[2:] {
		assert.NotContains(t, r, "cpu_percent", "%s has no live figures", r["id"])
		assert.NotContains(t, r, "rss_bytes")
	}
}

// TestTopFlags: the usage errors, before any daemon is asked.
func TestTopFlags(t *testing.T) {
	for _, args := range [][]string{
		{"top", "--sort", "disk"},
		{"top", "--interval", "1ms"},
		{"top", "--json"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(args, strings.NewReader(""), &stdout, &stderr)
		assert.Equal(t, exitUsage, code, "%v: %s", args, stderr.String())
		assert.Equal(t, 1, strings.Count(stderr.String(), "\n"), "one line: %s", stderr.String())
	}
}

// TestDrawTopPipe: on a pipe a frame is plain text (no escape sequence)
// and ends with a blank line, so frames follow one another.
func TestDrawTopPipe(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, drawTop(&out, topFixture(), "cpu", 2*time.Second, false, false))
	s := out.String()
	assert.NotContains(t, s, "\x1b")
	assert.Contains(t, s, "4 running, by cpu, every 2s\n")
	assert.True(t, strings.HasSuffix(s, "\n\n"), "%q", s)
	out.Reset()
	require.NoError(t, drawTop(&out, topFixture(), "mem", time.Second, true, true))
	assert.True(t, strings.HasPrefix(out.String(), "\x1b[H\x1b[2J"), "a terminal's frame replaces the last")
	assert.Contains(t, out.String(), "q: quit")
}
