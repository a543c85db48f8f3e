package registry

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

// TestRow: every column's text of one process, as ps and the dashboard
// show it.
func TestRow(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	web := Info{ID: "proc_ba9876543210", Name: "web", Backend: "local", State: StateRunning, PID: 7,
		CreatedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour + 59*time.Minute + 30*time.Second),
		Ready: &ReadyOptions{Port: 3000}, ReadyAt: now, Ports: []int{3000, 3001, 3002, 9229},
		Command: `'python3' '-m' 'http.server' '8000'`}
	var keys []string
	for _, c := range ListColumns() {
		keys = append(keys, c.Key)
	}
	require.Equal(t, []string{"id", "name", "backend", "state", "age", "left", "pid", "cpu", "mem", "ports", "command"}, keys)
	assert.Equal(t, Row{"proc_ba9876543210", "web", "local", "running, ready", "1m", "1h59m", "7", "-", "-", "3000,3001,3002,+1",
		"python3 -m http.server 8000"}, web.Row(now))
	web.TreeRunning, web.Stats = true, &Stats{CPUPercent: 97.4, RSSBytes: 212 << 20}
	row := web.Row(now)
	assert.Equal(t, []string{"97%", "212M"}, []string(row[7:9]), "CPU and MEM of a measured tree")

	// Finished, with what it left running: no PID, no ports, the
	// leftovers in its state.
	done := Info{ID: "proc_0123456789ab", Backend: "docker://c", State: StateExited, Status: &env.ExitStatus{Code: 0},
		Leftover: 1, TreeRunning: true, CreatedAt: now.Add(-50 * time.Hour), Command: "npm run dev &"}
	assert.Equal(t, Row{"proc_0123456789ab", "-", "docker://c", "exited (0), 1 left running", "2d", "-", "-", "-", "-", "-",
		"npm run dev &"}, done.Row(now))

	paused := Info{ID: "proc_0123456789ab", Backend: "docker://c", State: StateRunning, PortsUnknown: true,
		BackendCondition: env.ConditionPaused, KillPending: true, CreatedAt: now}
	row = paused.Row(now)
	assert.Equal(t, "running (docker://c paused), kill pending", row[3])
	assert.Equal(t, "?", row[9], "ports nobody could tell")
}

// TestTable: NAME, LEFT and PORTS are columns only when some process has
// one.
func TestTable(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	plain := Info{ID: "a", Backend: "local", State: StateRunning, CreatedAt: now, Command: "sleep 60"}
	cols, rows := Table([]Info{plain}, now)
	var titles []string
	for _, c := range cols {
		titles = append(titles, c.Title)
	}
	assert.Equal(t, []string{"ID", "BACKEND", "STATE", "AGE", "PID", "COMMAND"}, titles)
	assert.Equal(t, []Row{{"a", "local", "running", "0s", "-", "sleep 60"}}, rows)

	named, ttl, ported := plain, plain, plain
	named.Name = "n"
	ttl.ExpiresAt, ttl.State = now.Add(time.Hour), StateExited // finished: "-", but the column is there
	ported.PortsUnknown = true
	cols, rows = Table([]Info{plain, named, ttl, ported}, now)
	titles = titles[:0]
	for _, c := range cols {
		titles = append(titles, c.Title)
	}
	assert.Equal(t, []string{"ID", "NAME", "BACKEND", "STATE", "AGE", "LEFT", "PID", "PORTS", "COMMAND"}, titles)
	assert.Equal(t, Row{"a", "-", "local", "exited", "0s", "-", "-", "-", "sleep 60"}, rows[2])
	_, rows = Table(nil, now)
	assert.Empty(t, rows, "no processes, no rows")

	// CPU and MEM once some listed tree that runs was measured; a
	// finished one's last figures are not its cost now.
	measured, finished := plain, plain
	measured.TreeRunning, measured.Stats = true, &Stats{CPUPercent: 3.25, RSSBytes: 1536 << 20}
	finished.State, finished.Stats = StateExited, &Stats{CPUPercent: 50, RSSBytes: 1 << 30}
	cols, _ = Table([]Info{plain, finished}, now)
	assert.False(t, slices.ContainsFunc(cols, func(c Column) bool { return c.Key == "cpu" || c.Key == "mem" }),
		"no column for figures of a tree that no longer runs")
	cols, rows = Table([]Info{plain, measured, finished}, now)
	titles = titles[:0]
	for _, c := range cols {
		titles = append(titles, c.Title)
	}
	assert.Equal(t, []string{"ID", "BACKEND", "STATE", "AGE", "PID", "CPU", "MEM", "COMMAND"}, titles)
	assert.Equal(t, []string{"-", "-"}, []string(rows[0][5:7]), "not measured yet")
	assert.Equal(t, []string{"3.2%", "1.5G"}, []string(rows[1][5:7]))
	assert.Equal(t, []string{"-", "-"}, []string(rows[2][5:7]), "finished")
}

func TestPercentAndBytesText(t *testing.T) {
	for p, want := range map[float64]string{0: "0%", 0.04: "0%", 0.5: "0.5%", 9.9: "9.9%", 9.96: "10%", 97.4: "97%", 250: "250%", -1: "0%"} {
		assert.Equal(t, want, PercentText(p), "%v", p)
	}
	for n, want := range map[int64]string{0: "0B", 900: "900B", 1024: "1K", 1536: "1.5K", 512 << 10: "512K",
		212 << 20: "212M", 10 << 20: "10M", 9<<20 + 900<<10: "9.9M", 1023 << 20: "1023M", 1024 << 20: "1G",
		3 << 40: "3T", 2048 << 40: "2048T"} {
		assert.Equal(t, want, BytesText(n), "%d", n)
	}
}

func TestListStateAndTimeLeft(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	web := Info{State: StateRunning, ExpiresAt: now.Add(time.Hour + 59*time.Minute + 30*time.Second),
		Ready: &ReadyOptions{Port: 3000}}
	assert.Equal(t, "running, not ready", web.listState())
	web.ReadyAt = now
	assert.Equal(t, "running, ready", web.listState())
	web.State, web.Status = StateExited, nil
	assert.Equal(t, "exited", web.listState(), "readiness says nothing once it ended")
	assert.Equal(t, "-", web.timeLeft(now), "nothing of it runs")
	web.TreeRunning = true
	assert.Equal(t, "1h59m", web.timeLeft(now), "what it left running is still killed at expiry")

	// An idle timeout counts too, and the earlier end wins.
	idle := Info{State: StateRunning, TreeRunning: true, IdleExpiresAt: now.Add(4*time.Minute + 30*time.Second)}
	assert.Equal(t, "4m30s", idle.timeLeft(now))
	idle.ExpiresAt = now.Add(time.Hour)
	assert.Equal(t, "4m30s", idle.timeLeft(now), "the idle timeout ends it first")
	idle.ExpiresAt = now.Add(time.Minute)
	assert.Equal(t, "1m0s", idle.timeLeft(now), "the TTL ends it first")
	cols, rows := Table([]Info{{ID: "i", State: StateRunning, TreeRunning: true, IdleExpiresAt: now.Add(12 * time.Second)}}, now)
	left := slices.IndexFunc(cols, func(c Column) bool { return c.Key == "left" })
	require.GreaterOrEqual(t, left, 0, "a text table shows LEFT for a process with only an idle timeout")
	assert.Equal(t, "12s", rows[0][left])

	for d, want := range map[time.Duration]string{
		-time.Second: "0s", 0: "0s", 999 * time.Millisecond: "0s", 59 * time.Second: "59s", 90 * time.Second: "1m30s",
		time.Hour: "1h0m", 47*time.Hour + 59*time.Minute: "47h59m", 49 * time.Hour: "2d1h",
	} {
		assert.Equal(t, want, shortDuration(d), "%s", d)
	}
	for d, want := range map[time.Duration]string{
		0: "0s", 59 * time.Second: "59s", 61 * time.Second: "1m", 59 * time.Minute: "59m", 47 * time.Hour: "47h", 49 * time.Hour: "2d",
	} {
		assert.Equal(t, want, ageText(d), "%s", d)
	}
}
