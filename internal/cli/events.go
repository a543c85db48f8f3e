package cli

import (
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/registry"
)

func newEventsCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		follow bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "events [-f]",
		Short: "Print the daemon's recent events (started, exited, watch matches); -f follows",
		Long: `Print the daemon's last 256 events; with -f, print events as they happen
until interrupted. Events are rate-limited by the registry (15 per 10 s, then
a 30 s pause ending with a summary of what was held back), except the exit of a
process started with --notify: that one always arrives, with its exit status
and the last lines of its output (at most 2 KiB, printed under it). An exit is
not shown to anyone once a caller got the result through wait or logs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, err := connect(cmd.Context(), stderr)
			if err != nil {
				return err
			}
			print := func(ev registry.Event) error {
				if asJSON {
					return printJSON(stdout, ev)
				}
				_, err := fmt.Fprintf(stdout, "%s  %-14s %s\n", ev.Time.Local().Format("15:04:05.000"), ev.Type, oneLine(ev.Summary))
				if err != nil || ev.Tail == "" {
					return err
				}
				// The last lines of a notified exit's output, set off so
				// that they cannot be mistaken for events.
				for line := range strings.SplitSeq(ev.Tail, "\n") {
					if _, err := fmt.Fprintf(stdout, "    │ %s\n", line); err != nil {
						return err
					}
				}
				return nil
			}
			if !follow {
				evs, err := c.History(cmd.Context())
				if err != nil {
					return daemonError("events", err)
				}
				if asJSON {
					if evs == nil {
						evs = []registry.Event{}
					}
					return printJSON(stdout, evs)
				}
				for _, ev := range evs {
					print(ev)
				}
				return nil
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			err = c.FollowEvents(ctx, nil, print)
			if err != nil && ctx.Err() == nil {
				return daemonError("events", err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "print events as they happen")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (one object per event)")
	return cmd
}
