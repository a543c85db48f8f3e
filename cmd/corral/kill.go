package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/registry"
)

func newKillCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		sigName string
		grace   time.Duration
		force   bool
		all     bool
		labels  []string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "kill [-s SIG] [--grace DUR] [--force] ID... | kill --all [--label k=v]",
		Short: "Kill background process trees (SIG, grace period, SIGKILL, verified)",
		Long: `Kill each process's whole tree: send SIG (default TERM), wait --grace for it to
exit, then SIGKILL, and verify nothing of the tree is left. --force sends
SIGKILL at once. A process that had already ended is reported as such.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			var sig env.Signal
			if sigName != "" {
				s, err := env.ParseSignal(sigName)
				if err != nil {
					return usageErrorf("kill: -s: %v", err)
				}
				sig = s
			}
			if grace < 0 {
				return usageErrorf("kill: --grace %s: must not be negative", grace)
			}
			switch {
			case all && len(args) > 0:
				return usageErrorf("kill: give IDs or --all, not both")
			case !all && len(args) == 0:
				return usageErrorf("kill: missing ID (or --all)")
			case !all && len(labels) > 0:
				return usageErrorf("kill: --label selects processes for --all only")
			}
			l, err := parseLabelFlags("kill", labels)
			if err != nil {
				return err
			}
			graceStr := ""
			if grace > 0 {
				graceStr = grace.String()
			}
			c, _, err := connect(cmd.Context(), stderr)
			if err != nil {
				return err
			}
			var results []registry.KillResult
			var errs []error
			if all {
				results, err = c.KillAll(cmd.Context(), daemon.KillAllRequest{Labels: l, Signal: sig, Grace: graceStr})
				if err != nil {
					errs = append(errs, err)
				}
			} else {
				for _, id := range args {
					r, err := c.Kill(cmd.Context(), id, daemon.KillRequest{Signal: sig, Grace: graceStr, Force: force})
					if err != nil {
						errs = append(errs, fmt.Errorf("%s: %w", id, err))
						if r.ID == "" {
							continue
						}
					}
					results = append(results, r)
				}
			}
			if asJSON {
				if results == nil {
					results = []registry.KillResult{}
				}
				printJSON(stdout, results)
			} else {
				for _, r := range results {
					fmt.Fprintln(stdout, killLine(r))
				}
			}
			if len(errs) > 0 {
				return daemonError("kill", errors.Join(errs...))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&sigName, "signal", "s", "", "first signal: TERM (default), INT, HUP, KILL, ... or a number")
	f.DurationVar(&grace, "grace", 0, "time between the signal and SIGKILL (default: the daemon's, 5s)")
	f.BoolVar(&force, "force", false, "send SIGKILL at once")
	f.BoolVar(&all, "all", false, "kill every running process (with --label: those carrying the labels)")
	f.StringArrayVar(&labels, "label", nil, "with --all: only processes with this label KEY=VALUE (repeatable)")
	f.BoolVar(&asJSON, "json", false, "print the results as JSON")
	return cmd
}

func killLine(r registry.KillResult) string {
	status := ""
	if r.Status != nil {
		status = " (" + r.Status.String() + ")"
	}
	switch {
	case r.AlreadyExited:
		return fmt.Sprintf("%s already exited: %s%s", r.ID, r.State, status)
	case len(r.Survivors) > 0:
		return fmt.Sprintf("%s NOT fully killed: survivors %v", r.ID, r.Survivors)
	case r.Escalated:
		return fmt.Sprintf("%s killed: %s, then SIGKILL after the grace period%s", r.ID, r.Signal, status)
	}
	return fmt.Sprintf("%s killed: %s%s", r.ID, r.Signal, status)
}
