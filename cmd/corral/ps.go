package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/registry"
)

func newPSCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		opts   registry.ListOptions
		labels []string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "ps [-a] [--backend B] [--label k=v]",
		Short: "List background processes (running ones; all with -a)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := parseLabelFlags("ps", labels)
			if err != nil {
				return err
			}
			opts.Labels = l
			c, st, err := connect(cmd.Context(), stderr)
			if err != nil {
				return err
			}
			if st.Notice != "" {
				fmt.Fprintf(stderr, "corral: notice: %s\n", oneLine(st.Notice))
			}
			list, err := c.List(cmd.Context(), opts)
			if err != nil {
				return daemonError("ps", err)
			}
			if asJSON {
				if list == nil {
					list = []registry.Info{}
				}
				return printJSON(stdout, list)
			}
			writePS(stdout, list, time.Now())
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&opts.All, "all", "a", false, "include finished processes")
	f.StringVar(&opts.Backend, "backend", "", "only processes of this backend target")
	f.StringArrayVar(&labels, "label", nil, "only processes with this label KEY=VALUE (repeatable)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.BoolVar(&opts.WithRef, "ref", false, "with --json: include each detached process's backend-private re-attach reference (ref)")
	f.BoolVar(&opts.Ports, "ports", true, "look up the TCP ports each tree listens on (one look per backend; \"?\" when a backend does not answer in time)")
	return cmd
}

// writePS prints the table. NAME, LEFT (the time left of a TTL) and PORTS
// (the TCP ports the tree listens on; "?" when its backend did not tell in
// time) are columns only when some listed process has one, to keep the
// table narrow where they say nothing. STATE carries the backend's
// condition while it is not ok ("running (docker://web paused)").
func writePS(w io.Writer, list []registry.Info, now time.Time) {
	var named, ttl, ports bool
	for _, in := range list {
		named = named || in.Name != ""
		ttl = ttl || !in.ExpiresAt.IsZero()
		ports = ports || len(in.Ports) > 0 || in.PortsUnknown
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(id, name, backend, state, age, left, pid, portsCol, command string) {
		cols := []string{id}
		if named {
			cols = append(cols, name)
		}
		cols = append(cols, backend, state, age)
		if ttl {
			cols = append(cols, left)
		}
		cols = append(cols, pid)
		if ports {
			cols = append(cols, portsCol)
		}
		fmt.Fprintln(tw, strings.Join(append(cols, command), "\t"))
	}
	row("ID", "NAME", "BACKEND", "STATE", "AGE", "LEFT", "PID", "PORTS", "COMMAND")
	for _, in := range list {
		pid := "-"
		if in.PID > 0 {
			pid = fmt.Sprint(in.PID)
		}
		ports := portList(in.Ports)
		if in.PortsUnknown {
			ports = "?"
		}
		row(in.ID, orDash(in.Name), in.Backend, psState(in), age(now.Sub(in.CreatedAt)), timeLeft(in, now), pid,
			ports, clipCommand(in.Command, 60))
	}
	tw.Flush()
}

// psState is StateText plus, for a running process with readiness
// conditions, whether they hold yet.
func psState(in registry.Info) string {
	s := in.StateText()
	if in.Ready != nil && !in.State.Final() {
		if in.ReadyAt.IsZero() {
			return s + ", not ready"
		}
		return s + ", ready"
	}
	return s
}

// timeLeft is the time left of the process's TTL ("1h59m", "4m30s",
// "12s"), "-" when it has none or nothing of it runs any more.
func timeLeft(in registry.Info, now time.Time) string {
	if in.ExpiresAt.IsZero() || in.State.Final() && !in.TreeRunning {
		return "-"
	}
	return shortDuration(in.ExpiresAt.Sub(now))
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

// portList shows up to three ports, then how many more.
func portList(ports []int) string {
	if len(ports) == 0 {
		return "-"
	}
	const show = 3
	parts := make([]string, 0, show+1)
	for i, p := range ports {
		if i == show {
			parts = append(parts, fmt.Sprintf("+%d", len(ports)-show))
			break
		}
		parts = append(parts, fmt.Sprint(p))
	}
	return strings.Join(parts, ",")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func age(d time.Duration) string {
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

func clipCommand(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
