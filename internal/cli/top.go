package cli

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/shellquote"
	"github.com/corralhq/corral/registry"
)

const topLong = `Show the running background processes, the costliest first, refreshed every
--interval: CPU (a share of one core, as corral stats shows it), resident
memory (MEM) and its peak, how many processes each tree has alive, the limits
it runs under (start's --memory, --cpus, --pids; "-" for none), its state and
its command, clipped to the terminal's width.

--sort cpu (the default) or --sort mem picks the order; on a terminal the keys
c and m switch it, and q (or Ctrl-C) quits. The figures are the daemon's last
samples (corral stats): a process not measured yet, or on a backend that
cannot measure its processes, shows "-" and comes last.

On a terminal each frame replaces the last; on a pipe the frames follow one
another. --once prints one frame and exits; --json (with --once) prints the
rows as JSON.`

// topSorts are the orders corral top knows, by the name --sort gives them.
var topSorts = []string{"cpu", "mem"}

// topMinInterval keeps corral top from asking faster than the daemon's
// sampler can give anything new.
const topMinInterval = 100 * time.Millisecond

func newTopCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	var (
		by       string
		interval time.Duration
		once     bool
		asJSON   bool
		backend  string
	)
	cmd := &cobra.Command{
		Use:     "top [--sort cpu|mem] [--interval D] [--once [--json]]",
		Short:   "Show the running processes, the costliest first, refreshed live",
		Long:    topLong,
		Example: "  corral top\n  corral top --sort mem --interval 5s\n  corral top --once --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(topSorts, by) {
				return usageErrorf("top: --sort %q: give cpu or mem", clipCommand(by, 20))
			}
			if interval < topMinInterval {
				return usageErrorf("top: --interval %s: give at least %s", interval, topMinInterval)
			}
			if asJSON && !once {
				return usageErrorf("top: --json prints one frame: add --once")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			c, _, err := connect(ctx, stderr)
			if err != nil {
				return err
			}
			opts := registry.ListOptions{Backend: backend}
			if once {
				list, err := c.List(ctx, opts)
				if err != nil {
					return daemonError("top", err)
				}
				sortTop(list, by)
				if asJSON {
					return printJSON(stdout, topRows(list))
				}
				writeTop(stdout, list, topWidth(stdout))
				return nil
			}
			return runTop(ctx, c, opts, by, interval, stdin, stdout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&by, "sort", "cpu", "order: cpu (CPU use) or mem (resident memory), the largest first")
	f.DurationVar(&interval, "interval", 2*time.Second, "time between two frames")
	f.BoolVar(&once, "once", false, "print one frame and exit")
	f.BoolVar(&asJSON, "json", false, "with --once: print the rows as JSON")
	f.StringVar(&backend, "backend", "", "only processes of this backend target")
	return cmd
}

// runTop draws a frame every interval until ctx is done or q is pressed.
func runTop(ctx context.Context, c *daemon.Client, opts registry.ListOptions, by string, interval time.Duration, stdin io.Reader, stdout io.Writer) error {
	_, onTerminal := terminalSize(stdout)
	var keys chan byte
	if onTerminal {
		if restore, ok := makeCbreak(stdin); ok {
			defer restore()
			keys = make(chan byte)
			// The read cannot be cancelled; corral exits right after top
			// ends, which ends the goroutine too.
			go readKeys(stdin, keys)
		}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var list []registry.Info
	fetch := true
	for {
		if fetch {
			var err error
			if list, err = c.List(ctx, opts); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return daemonError("top", err)
			}
		}
		sortTop(list, by)
		if err := drawTop(stdout, list, by, interval, onTerminal, keys != nil); err != nil {
			return nil // stdout closed: nobody is watching
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			fetch = true
		case k, ok := <-keys:
			if !ok {
				keys = nil // stdin closed: no more keys, the frames go on
			}
			fetch = false
			switch k {
			case 'q', 'Q':
				return nil
			case 'c', 'C':
				by = "cpu"
			case 'm', 'M':
				by = "mem"
			}
		}
	}
}

// readKeys sends each byte read from r to keys, and closes keys at the end
// of r.
func readKeys(r io.Reader, keys chan<- byte) {
	defer close(keys)
	buf := make([]byte, 16)
	for {
		n, err := r.Read(buf)
		for _, b := range buf[:n] {
			keys <- b
		}
		if err != nil {
			return
		}
	}
}

// drawTop prints one frame: on a terminal over the last one, cut to the
// window; on a pipe after it, separated by a blank line.
func drawTop(w io.Writer, list []registry.Info, by string, interval time.Duration, onTerminal, withKeys bool) error {
	var b bytes.Buffer
	keys := ""
	if withKeys {
		keys = " (c: by cpu, m: by mem, q: quit)"
	}
	width, height := 0, 0
	if ws, ok := terminalSize(w); ok && onTerminal {
		width, height = int(ws.Cols), int(ws.Rows)
	}
	b.WriteString(clipLine(fmt.Sprintf("%s  %d running, by %s, every %s%s", time.Now().Format("15:04:05"), len(list), by, interval, keys), width))
	b.WriteByte('\n')
	var table bytes.Buffer
	writeTop(&table, list, width)
	lines := strings.SplitAfter(table.String(), "\n")
	if height > 2 && len(lines) > height-2 {
		lines = lines[:height-2] // the title and the cursor's line stay on screen
	}
	b.WriteString(strings.Join(lines, ""))
	var frame []byte
	if onTerminal {
		frame = append([]byte("\x1b[H\x1b[2J"), b.Bytes()...)
	} else {
		frame = append(b.Bytes(), '\n')
	}
	_, err := w.Write(frame)
	return err
}

// topWidth is the width of w when it is a terminal; 0 otherwise.
func topWidth(w io.Writer) int {
	if ws, ok := terminalSize(w); ok {
		return int(ws.Cols)
	}
	return 0
}

// topCost is a process's figure for the order by; -1 when it has none, so
// that unmeasured processes come last.
func topCost(in registry.Info, by string) float64 {
	if in.Stats == nil || !in.TreeRunning {
		return -1
	}
	if by == "mem" {
		return float64(in.Stats.RSSBytes)
	}
	return in.Stats.CPUPercent
}

// sortTop orders list by by ("cpu" or "mem"), the largest first; the other
// figure, then the ID, breaks ties so that equal rows do not swap between
// frames.
func sortTop(list []registry.Info, by string) {
	other := "mem"
	if by == "mem" {
		other = "cpu"
	}
	slices.SortStableFunc(list, func(a, b registry.Info) int {
		return cmp.Or(
			cmp.Compare(topCost(b, by), topCost(a, by)),
			cmp.Compare(topCost(b, other), topCost(a, other)),
			cmp.Compare(a.ID, b.ID))
	})
}

// topRow is one process of corral top --once --json. The figures are
// absent for a process without them.
type topRow struct {
	ID      string `json:"id"`
	Name    string `json:"name,omitempty"`
	Backend string `json:"backend"`
	*topFigures
	Limits  *env.Limits    `json:"limits,omitempty"`
	State   registry.State `json:"state"`
	Command string         `json:"command"`
}

type topFigures struct {
	CPUPercent   float64 `json:"cpu_percent"`
	RSSBytes     int64   `json:"rss_bytes"`
	PeakRSSBytes int64   `json:"peak_rss_bytes"`
	Pids         int     `json:"pids"`
}

func topRows(list []registry.Info) []topRow {
	rows := make([]topRow, 0, len(list))
	for _, in := range list {
		r := topRow{ID: in.ID, Name: in.Name, Backend: in.Backend, Limits: in.Limits, State: in.State,
			Command: shellquote.Display(in.Command)}
		if st := in.Stats; st != nil && in.TreeRunning {
			r.topFigures = &topFigures{CPUPercent: st.CPUPercent, RSSBytes: st.RSSBytes, PeakRSSBytes: st.PeakRSSBytes, Pids: st.Pids}
		}
		rows = append(rows, r)
	}
	return rows
}

// writeTop prints list as a table in its order. width > 0 clips each line
// to it (the command, last, goes first); 0 clips the command as ps does.
func writeTop(w io.Writer, list []registry.Info, width int) {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tBACKEND\tCPU%\tMEM\tPEAK\tPIDS\tLIMITS\tSTATE\tCOMMAND")
	for _, in := range list {
		cpu, mem, peak, pids := "-", "-", "-", "-"
		if st := in.Stats; st != nil && in.TreeRunning {
			cpu = registry.PercentText(st.CPUPercent)
			mem = registry.BytesText(st.RSSBytes)
			peak = registry.BytesText(st.PeakRSSBytes)
			pids = fmt.Sprint(st.Pids)
		}
		limits := "-"
		if in.Limits != nil && !in.Limits.IsZero() {
			limits = in.Limits.String()
		}
		command := shellquote.Display(in.Command)
		if width <= 0 {
			command = clipCommand(command, 60)
		} else {
			command = strings.Join(strings.Fields(command), " ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", in.ID, orDash(in.Name), in.Backend,
			cpu, mem, peak, pids, limits, in.StateText(), command)
	}
	tw.Flush()
	if width <= 0 {
		_, _ = w.Write(b.Bytes())
		return
	}
	for _, line := range strings.SplitAfter(b.String(), "\n") {
		if line == "" {
			continue
		}
		fmt.Fprintln(w, clipLine(strings.TrimSuffix(line, "\n"), width))
	}
}

// clipLine cuts s to width runes, the cut marked; width <= 0 keeps it.
func clipLine(s string, width int) string {
	if r := []rune(s); width > 0 && len(r) > width {
		return string(r[:width-1]) + "…"
	}
	return s
}
