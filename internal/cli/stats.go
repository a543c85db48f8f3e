package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/registry"
)

const statsLong = `Print what a process's tree costs, as the daemon last sampled it (it never
waits for a backend): CPU (a share of one core: 100% is one full core, more on
several), CPU time used so far, resident memory (RSS) and its peak, how many
processes of the tree are alive, what they read from and wrote to storage, and
the limits the tree runs under (start's --memory, --cpus, --pids).
The daemon samples a running tree every second while it is young or busy, and
down to every 10 s while it is quiet.

-f prints one line a second until nothing of the tree runs, or Ctrl-C.

A process without figures gets one line saying why, and exit 0: its backend
cannot measure its processes, it has not been measured yet, or it ended
before it was. An unknown ID exits 2.`

// statsFirstWait bounds how long stats waits for the first sample of a
// process that has just started.
const statsFirstWait = 3 * time.Second

func newStatsCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		follow bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:     "stats [-f] [--json] ID",
		Short:   "Print the CPU, memory and processes a background process's tree uses",
		Long:    statsLong,
		Example: "  corral stats web\n  corral stats -f proc_3f2a9c1d7e00\n  corral stats --json web",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			c, _, err := connect(ctx, stderr)
			if err != nil {
				return err
			}
			in, rep, err := firstStats(ctx, c, args[0])
			if err != nil {
				return daemonError("stats", err)
			}
			if !follow {
				if asJSON {
					return printJSON(stdout, rep)
				}
				writeStats(stdout, in, rep)
				return nil
			}
			return followStats(ctx, c, in, rep, asJSON, stdout)
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "print a line a second until the process's tree ends")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON (with -f: one object a line, without history)")
	return cmd
}

// firstStats reads the process and its report, waiting up to
// statsFirstWait for the first sample of a running tree that the daemon
// has not measured yet.
func firstStats(ctx context.Context, c *daemon.Client, id string) (registry.Info, registry.StatsReport, error) {
	deadline := time.Now().Add(statsFirstWait)
	for {
		in, err := c.Get(ctx, id)
		if err != nil {
			return in, registry.StatsReport{}, err
		}
		rep, err := c.Stats(ctx, in.ID)
		if err != nil || rep.Stats != nil || rep.Unsupported != "" || !in.TreeRunning || time.Now().After(deadline) {
			return in, rep, err
		}
		select {
		case <-ctx.Done():
			return in, rep, nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// noStats says in one line why rep has no figures; "" when it has some.
func noStats(in registry.Info, rep registry.StatsReport) string {
	switch {
	case rep.Stats != nil:
		return ""
	case rep.Unsupported != "":
		return fmt.Sprintf("%s: no figures: %s", procName(in), rep.Unsupported)
	case !in.TreeRunning:
		return fmt.Sprintf("%s: no figures: it ended before it was measured", procName(in))
	}
	return fmt.Sprintf("%s: not measured yet: try again in a second", procName(in))
}

// writeStats prints rep as one block.
func writeStats(w io.Writer, in registry.Info, rep registry.StatsReport) {
	if msg := noStats(in, rep); msg != "" {
		fmt.Fprintln(w, msg)
		return
	}
	st := rep.Stats
	fmt.Fprintf(w, "%s: %s\n", procName(in), in.StateText())
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if in.TreeRunning {
		fmt.Fprintf(tw, "CPU\t%s\n", registry.PercentText(st.CPUPercent))
	}
	fmt.Fprintf(tw, "CPU time\t%s\n", cpuTime(st.CPUSeconds))
	if in.TreeRunning {
		fmt.Fprintf(tw, "RSS\t%s\n", registry.BytesText(st.RSSBytes))
	}
	fmt.Fprintf(tw, "peak RSS\t%s\n", registry.BytesText(st.PeakRSSBytes))
	if in.TreeRunning {
		fmt.Fprintf(tw, "processes\t%d\n", st.Pids)
	}
	fmt.Fprintf(tw, "I/O\tread %s, written %s\n", registry.BytesText(st.ReadBytes), registry.BytesText(st.WriteBytes))
	if in.Limits != nil {
		// Beside the figures they cap: RSS against the memory limit.
		fmt.Fprintf(tw, "limits\t%s\n", in.Limits)
	}
	if in.RunawayOptions != nil || in.Runaway {
		// The process's own thresholds; the daemon's default is not known here.
		line := in.RunawayOptions.String()
		if in.Runaway {
			line = strings.TrimPrefix(line+"; on now: see corral events", "; ")
		}
		fmt.Fprintf(tw, "runaway\t%s\n", line)
	}
	fmt.Fprintf(tw, "sampled\t%s\n", st.SampledAt.Local().Format("15:04:05"))
	tw.Flush()
}

// cpuTime shows CPU seconds as a duration: "0.4s", "12.3s", "2m5s".
func cpuTime(s float64) string {
	d := time.Duration(s * float64(time.Second))
	if d < time.Minute {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return d.Truncate(time.Second).String()
}

// statsLine is one line of stats -f.
func statsLine(st *registry.Stats) string {
	return fmt.Sprintf("%s  CPU %-5s  MEM %-6s  peak %-6s  pids %d  cpu time %s",
		st.SampledAt.Local().Format("15:04:05"), registry.PercentText(st.CPUPercent), registry.BytesText(st.RSSBytes),
		registry.BytesText(st.PeakRSSBytes), st.Pids, cpuTime(st.CPUSeconds))
}

// followStats prints a line a second, each new sample once, until the
// tree ends or ctx is done (Ctrl-C). A process without figures gets its
// one line and the follow ends.
func followStats(ctx context.Context, c *daemon.Client, in registry.Info, rep registry.StatsReport, asJSON bool, stdout io.Writer) error {
	var last time.Time
	emit := func(rep registry.StatsReport) error {
		if rep.Stats == nil || !rep.Stats.SampledAt.After(last) {
			return nil
		}
		last = rep.Stats.SampledAt
		if asJSON {
			rep.History = nil
			b, err := json.Marshal(rep)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(stdout, "%s\n", b)
			return err
		}
		_, err := fmt.Fprintln(stdout, statsLine(rep.Stats))
		return err
	}
	if rep.Stats == nil && (rep.Unsupported != "" || !in.TreeRunning) {
		fmt.Fprintln(stdout, noStats(in, rep))
		return nil
	}
	if !asJSON {
		fmt.Fprintf(stdout, "%s: a line a second until it ends (Ctrl-C to stop)\n", procName(in))
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if in.TreeRunning {
			if err := emit(rep); err != nil {
				return nil // stdout closed: nothing more to say
			}
		}
		if !in.TreeRunning {
			if !asJSON {
				fmt.Fprintf(stdout, "%s: %s\n", procName(in), in.StateText())
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		var err error
		if in, err = c.Get(ctx, in.ID); err == nil {
			rep, err = c.Stats(ctx, in.ID)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return daemonError("stats", err)
		}
	}
}
