package registry

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/shellquote"
)

// A process as people read it in a list. corral ps and the dashboard show
// the same columns with the same texts, and both take them from here: a
// front end only lays them out (a text table, an HTML table), so the two
// cannot drift apart again.

// Column is one column of a process list.
type Column struct {
	// Key names the column for programs (the dashboard's CSS class).
	Key string `json:"key"`
	// Title is its heading, as corral ps prints it.
	Title string `json:"title"`
	// Optional: a text table shows the column only when some listed
	// process has something in it (Table), so that ps stays narrow where
	// the column would say nothing.
	Optional bool `json:"optional,omitempty"`

	text func(in Info, now time.Time) string
	has  func(in Info) bool // for Optional columns
}

var columns = []Column{
	{Key: "id", Title: "ID", text: func(in Info, _ time.Time) string { return in.ID }},
	{Key: "name", Title: "NAME", Optional: true,
		text: func(in Info, _ time.Time) string { return orDash(in.Name) },
		has:  func(in Info) bool { return in.Name != "" }},
	{Key: "backend", Title: "BACKEND", text: func(in Info, _ time.Time) string { return in.Backend }},
	{Key: "state", Title: "STATE", text: func(in Info, _ time.Time) string { return in.listState() }},
	{Key: "age", Title: "AGE", text: func(in Info, now time.Time) string { return ageText(now.Sub(in.CreatedAt)) }},
	{Key: "left", Title: "LEFT", Optional: true, text: Info.timeLeft,
		has: func(in Info) bool { return !in.ExpiresAt.IsZero() || !in.IdleExpiresAt.IsZero() }},
	{Key: "pid", Title: "PID", text: func(in Info, _ time.Time) string {
		if in.PID > 0 {
			return fmt.Sprint(in.PID)
		}
		return "-"
	}},
	{Key: "cpu", Title: "CPU", Optional: true, text: func(in Info, _ time.Time) string { return in.cpuText() },
		has: Info.hasLiveStats},
	{Key: "mem", Title: "MEM", Optional: true, text: func(in Info, _ time.Time) string { return in.memText() },
		has: Info.hasLiveStats},
	{Key: "ports", Title: "PORTS", Optional: true, text: func(in Info, _ time.Time) string { return in.portsText() },
		has: func(in Info) bool { return len(in.Ports) > 0 || in.PortsUnknown }},
	{Key: "command", Title: "COMMAND", text: func(in Info, _ time.Time) string { return shellquote.Display(in.Command) }},
}

// ListColumns returns every column of a process list, in order; Row has
// one text for each.
func ListColumns() []Column { return slices.Clone(columns) }

// Row is one process in a list: the text of each column of ListColumns,
// in that order. The command is whole (a text table clips it to its
// width).
type Row []string

// Row returns in's texts as of now (AGE and LEFT count from it).
func (in Info) Row(now time.Time) Row {
	r := make(Row, len(columns))
	for i, c := range columns {
		r[i] = c.text(in, now)
	}
	return r
}

// Table returns the columns of a text table of list — each optional
// column only when some process of list has something in it — and each
// process's texts in those columns.
func Table(list []Info, now time.Time) ([]Column, []Row) {
	var shown []int
	for i, c := range columns {
		if !c.Optional || slices.ContainsFunc(list, c.has) {
			shown = append(shown, i)
		}
	}
	cols := make([]Column, len(shown))
	for k, i := range shown {
		cols[k] = columns[i]
	}
	rows := make([]Row, len(list))
	for j, in := range list {
		full := in.Row(now)
		rows[j] = make(Row, len(shown))
		for k, i := range shown {
			rows[j][k] = full[i]
		}
	}
	return cols, rows
}

// listState is StateText plus, for a running process with readiness
// conditions, whether they hold yet ("running, ready").
func (in Info) listState() string {
	s := in.StateText()
	if in.Ready != nil && !in.State.Final() {
		if in.ReadyAt.IsZero() {
			return s + ", not ready"
		}
		return s + ", ready"
	}
	return s
}

// timeLeft is the time left before the TTL or the idle timeout kills the
// tree, whichever comes first ("1h59m", "4m30s", "12s"); "-" when it has
// neither or nothing of it runs any more. The idle time left starts over
// with every write.
func (in Info) timeLeft(now time.Time) string {
	end := in.ExpiresAt
	if !in.IdleExpiresAt.IsZero() && (end.IsZero() || in.IdleExpiresAt.Before(end)) {
		end = in.IdleExpiresAt
	}
	if end.IsZero() || in.State.Final() && !in.TreeRunning {
		return "-"
	}
	return shortDuration(end.Sub(now))
}

// portsText shows up to three ports, then how many more; "?" when the
// backend did not tell them in time.
func (in Info) portsText() string {
	if in.PortsUnknown {
		return "?"
	}
	if len(in.Ports) == 0 {
		return "-"
	}
	const show = 3
	parts := make([]string, 0, show+1)
	for i, p := range in.Ports {
		if i == show {
			parts = append(parts, fmt.Sprintf("+%d", len(in.Ports)-show))
			break
		}
		parts = append(parts, fmt.Sprint(p))
	}
	return strings.Join(parts, ",")
}

// hasLiveStats: the registry has measured in's tree, which still runs.
func (in Info) hasLiveStats() bool { return in.Stats != nil && in.TreeRunning }

// cpuText is the tree's CPU use as a share of one core ("97%", "250%",
// "0.5%"); "-" before the first sample and once nothing of it runs.
func (in Info) cpuText() string {
	if !in.hasLiveStats() {
		return "-"
	}
	return PercentText(in.Stats.CPUPercent)
}

// memText is the tree's resident memory ("212M"); "-" as cpuText.
func (in Info) memText() string {
	if !in.hasLiveStats() {
		return "-"
	}
	return BytesText(in.Stats.RSSBytes)
}

// PercentText shows a cpu_percent as ps does: one decimal under 10
// ("0.5%", "9.9%"), whole above ("97%", "250%").
func PercentText(p float64) string {
	p = max(p, 0)
	if p < 9.95 {
		return strings.Replace(fmt.Sprintf("%.1f%%", p), ".0%", "%", 1)
	}
	return fmt.Sprintf("%.0f%%", p)
}

// BytesText shows a size in the units people read (K, M, G, T of 1024),
// with one decimal under 10 ("212M", "1.5G", "512K", "900B").
func BytesText(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%dB", max(n, 0))
	}
	v := float64(n)
	for _, unit := range []string{"K", "M", "G", "T"} {
		v /= 1024
		if v < 1023.5 || unit == "T" {
			if v < 9.95 {
				return strings.Replace(fmt.Sprintf("%.1f%s", v, unit), ".0"+unit, unit, 1)
			}
			return fmt.Sprintf("%.0f%s", v, unit)
		}
	}
	return "" // not reached: T takes every size left
}

// shortDuration shows d in at most two units, rounded down.
func shortDuration(d time.Duration) string {
	d = max(d, 0).Truncate(time.Second)
	switch {
	case d >= 48*time.Hour:
		return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
	case d >= time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	case d >= time.Minute:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%ds", int(d.Seconds()))
}

// ageText shows d in its largest unit: seconds, minutes, hours up to two
// days, then days.
func ageText(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
