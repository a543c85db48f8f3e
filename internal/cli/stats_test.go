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

// TestWriteStats: the block stats prints, for a running tree and a
// finished one, and the one line of a process without figures.
func TestWriteStats(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	st := &registry.Stats{CPUPercent: 97.4, CPUSeconds: 12.34, RSSBytes: 212 << 20, PeakRSSBytes: 340 << 20, Pids: 3,
		ReadBytes: 1536 << 10, WriteBytes: 0, SampledAt: at}
	in := registry.Info{ID: "proc_3f2a9c1d7e00", Name: "web", State: registry.StateRunning, TreeRunning: true}
	var out bytes.Buffer
	writeStats(&out, in, registry.StatsReport{ID: in.ID, Stats: st})
	clock := at.Local().Format("15:04:05")
	assert.Equal(t, "proc_3f2a9c1d7e00 (web): running\n"+
		"CPU        97%\n"+
		"CPU time   12.3s\n"+
		"RSS        212M\n"+
		"peak RSS   340M\n"+
		"processes  3\n"+
		"I/O        read 1.5M, written 0B\n"+
		"sampled    "+clock+"\n", out.String())

	// Finished: what it used in all, nothing live.
	out.Reset()
	done := in
	done.State, done.TreeRunning = registry.StateKilled, false
	writeStats(&out, done, registry.StatsReport{ID: in.ID, Stats: &registry.Stats{CPUSeconds: 125, PeakRSSBytes: 2 << 30, SampledAt: at}})
	assert.Equal(t, "proc_3f2a9c1d7e00 (web): killed\n"+
		"CPU time  2m5s\n"+
		"peak RSS  2G\n"+
		"I/O       read 0B, written 0B\n"+
		"sampled   "+clock+"\n", out.String())

	// With limits: in the flags' words, beside the figures they cap.
	out.Reset()
	limited := done
	limited.Limits = &env.Limits{Memory: 2 << 30, CPUs: 1.5, Pids: 512}
	writeStats(&out, limited, registry.StatsReport{ID: in.ID, Stats: &registry.Stats{CPUSeconds: 125, PeakRSSBytes: 2 << 30, SampledAt: at}})
	assert.Equal(t, "proc_3f2a9c1d7e00 (web): killed\n"+
		"CPU time  2m5s\n"+
		"peak RSS  2G\n"+
		"I/O       read 0B, written 0B\n"+
		"limits    memory 2G, cpus 1.5, pids 512\n"+
		"sampled   "+clock+"\n", out.String())

	// With runaway thresholds, and while runaway.
	out.Reset()
	hot := in
	hot.RunawayOptions = &registry.RunawayOptions{CPUPercent: 90, Memory: 4 << 30}
	hot.Runaway = true
	writeStats(&out, hot, registry.StatsReport{ID: in.ID, Stats: st})
	assert.Contains(t, out.String(), "runaway    cpu 90% for 2m0s, memory +4G in 2m0s; on now: see corral events\n")
	out.Reset()
	hot.RunawayOptions = nil // the daemon's thresholds
	writeStats(&out, hot, registry.StatsReport{ID: in.ID, Stats: st})
	assert.Contains(t, out.String(), "runaway    on now: see corral events\n")

	for _, tc := range []struct {
		in   registry.Info
		rep  registry.StatsReport
		want string
	}{
		{in, registry.StatsReport{Unsupported: "backend ssh://dev cannot measure its processes"},
			"proc_3f2a9c1d7e00 (web): no figures: backend ssh://dev cannot measure its processes\n"},
		{in, registry.StatsReport{}, "proc_3f2a9c1d7e00 (web): not measured yet: try again in a second\n"},
		{done, registry.StatsReport{}, "proc_3f2a9c1d7e00 (web): no figures: it ended before it was measured\n"},
	} {
		out.Reset()
		writeStats(&out, tc.in, tc.rep)
		assert.Equal(t, tc.want, out.String())
	}
	assert.Equal(t, clock+"  CPU 97%    MEM 212M    peak 340M    pids 3  cpu time 12.3s", statsLine(st))
}

// TestStatsCommand: stats of a running process through the daemon
// answers with figures, or, where the backend cannot measure, one line
// saying so, and exit 0 either way; --json is the report; -f ends when
// the process does; an unknown ID exits 2.
func TestStatsCommand(t *testing.T) {
	startTestDaemon(t)
	id := strings.TrimSpace(mustCorral(t, "start", "--label", "t=stats", "--", "sleep 60"))

	out := mustCorral(t, "stats", id)
	if !strings.Contains(out, "cannot measure its processes") {
		assert.Contains(t, out, id+": running\n", out)
		for _, line := range []string{"CPU ", "CPU time ", "RSS ", "peak RSS ", "processes ", "I/O "} {
			assert.Contains(t, out, "\n"+line, out)
		}
	} else {
		assert.Equal(t, 1, strings.Count(out, "\n"), "one line: %q", out)
	}

	var rep registry.StatsReport
	require.NoError(t, json.Unmarshal([]byte(mustCorral(t, "stats", "--json", id)), &rep))
	assert.Equal(t, id, rep.ID)
	assert.True(t, rep.Stats != nil || rep.Unsupported != "", "figures or why not: %+v", rep)

	short := strings.TrimSpace(mustCorral(t, "start", "--label", "t=stats", "--", "sleep 2"))
	out = mustCorral(t, "stats", "-f", short)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	assert.True(t, strings.Contains(last, "cannot measure") || strings.Contains(last, short+": exited (0)"),
		"-f ends with the process, saying so: %q", out)

	code, _, errOut := corral(t, "", "stats", "proc_000000000000")
	assert.Equal(t, exitUsage, code, errOut)
	mustCorral(t, "kill", "--force", id)
}
