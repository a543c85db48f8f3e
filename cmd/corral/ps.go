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
	return cmd
}

func writePS(w io.Writer, list []registry.Info, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tBACKEND\tSTATE\tAGE\tPID\tCOMMAND")
	for _, in := range list {
		state := in.StateText()
		pid := "-"
		if in.PID > 0 {
			pid = fmt.Sprint(in.PID)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", in.ID, in.Backend, state, age(now.Sub(in.CreatedAt)), pid, clipCommand(in.Command, 60))
	}
	tw.Flush()
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
