package cli

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

// writePS prints the table: registry.Table's columns and texts (the
// dashboard shows the same), the command clipped to keep a row on one
// line.
func writePS(w io.Writer, list []registry.Info, now time.Time) {
	cols, rows := registry.Table(list, now)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	cells := make([]string, len(cols))
	for i, c := range cols {
		cells[i] = c.Title
	}
	fmt.Fprintln(tw, strings.Join(cells, "\t"))
	for _, row := range rows {
		for i, c := range cols {
			cells[i] = row[i]
			if c.Key == "command" {
				cells[i] = clipCommand(row[i], 60)
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func clipCommand(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
