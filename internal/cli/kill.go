package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/targets"
	"github.com/corralhq/corral/registry"
)

func newKillCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		sigName  string
		grace    time.Duration
		force    bool
		escalate bool
		noEsc    bool
		all      bool
		labels   []string
		asJSON   bool
		port     int
		backend  string
	)
	cmd := &cobra.Command{
		Use:   "kill [-s SIG] [--grace DUR] [--force | --escalate=false] ID... | kill --all [--label k=v] | kill --port N [--backend B]",
		Short: "Kill background process trees (SIG, grace period, SIGKILL, verified)",
		Long: `Kill each process's whole tree: send SIG (default TERM), wait --grace for it to
exit, then SIGKILL whatever of the tree is left, and verify nothing is left.
--force sends SIGKILL at once. --escalate=false only sends SIG (HUP to reload
a server, an INT that may take its time), waits up to --grace and reports
whether the tree ended; it never sends SIGKILL (--no-escalate is its old name).

A process whose command exited while processes it started still run ('cmd &',
a server that daemonised; ps shows "1 left running") is reported as already
exited, and what it left running is killed the same way. --all includes such
processes. The result counts the processes the kill ended.

--port N kills the corral tree that listens on TCP port N (in --backend,
default local). When a program corral did not start holds the port, it
refuses with exit status 1 and names that program's PID and command: kill it
yourself if you mean to. Nothing listening on N is exit status 1 too.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			var sig env.Signal
			if sigName != "" {
				s, err := env.ParseSignal(sigName)
				if err != nil {
					return usageErrorf("kill: -s: %v", err)
				}
				sig = s
			}
			// The words are the registry's (KillOptions): it checks
			// them, a negative grace or --force with --escalate=false.
			opts := registry.KillOptions{Signal: sig, Grace: grace, Force: force}
			switch {
			case noEsc && cmd.Flags().Changed("escalate") && escalate:
				return usageErrorf("kill: --no-escalate is the old name of --escalate=false: give one of them")
			case noEsc:
				opts.Escalate = new(false)
			case cmd.Flags().Changed("escalate"):
				opts.Escalate = new(escalate)
			}
			switch {
			case cmd.Flags().Changed("port") && (all || len(args) > 0):
				return usageErrorf("kill: give IDs, --all or --port, only one of them")
			case cmd.Flags().Changed("port"):
				if err := checkPort("kill", "--port", port); err != nil {
					return err
				}
				if len(labels) > 0 {
					return usageErrorf("kill: --label selects processes for --all only")
				}
				if err := checkBackend(backend); err != nil {
					return usageErrorf("kill: %v", err)
				}
				c, _, err := connect(cmd.Context(), stderr)
				if err != nil {
					return err
				}
				return killPort(cmd.Context(), c, backend, port, opts, asJSON, stdout)
			case cmd.Flags().Changed("backend"):
				return usageErrorf("kill: --backend chooses where --port looks; IDs and --all need none")
			case all && len(args) > 0:
				return usageErrorf("kill: give IDs or --all, not both")
			case !all && len(args) == 0:
				return usageErrorf("kill: missing ID (or --all, or --port N)")
			case !all && len(labels) > 0:
				return usageErrorf("kill: --label selects processes for --all only")
			}
			l, err := parseLabelFlags("kill", labels)
			if err != nil {
				return err
			}
			c, _, err := connect(cmd.Context(), stderr)
			if err != nil {
				return err
			}
			var results []registry.KillResult
			var errs []error
			if all {
				results, err = c.KillAll(cmd.Context(), registry.KillAllOptions{Labels: l, Signal: opts.Signal, Grace: opts.Grace, Force: opts.Force, Escalate: opts.Escalate})
				if err != nil {
					errs = append(errs, err)
				}
			} else {
				results, errs = killIDs(cmd.Context(), c, args, opts)
			}
			return reportKills(stdout, results, errs, asJSON)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&sigName, "signal", "s", "", "first signal: TERM (default), INT, HUP, KILL, ... or a number")
	f.DurationVar(&grace, "grace", 0, "time between the signal and SIGKILL (default: the daemon's, 5s)")
	f.BoolVar(&force, "force", false, "send SIGKILL at once")
	f.BoolVar(&escalate, "escalate", true, "SIGKILL what is left after --grace; false sends only SIG and reports whether the tree ended within --grace")
	f.BoolVar(&noEsc, "no-escalate", false, "the old name of --escalate=false")
	// Kept for the scripts that use it, out of the help: one word per idea.
	_ = f.MarkHidden("no-escalate")
	f.BoolVar(&all, "all", false, "kill every running process (with --label: those carrying the labels)")
	f.StringArrayVar(&labels, "label", nil, "with --all: only processes with this label KEY=VALUE (repeatable)")
	f.BoolVar(&asJSON, "json", false, "print the results as JSON")
	f.IntVar(&port, "port", 0, "kill the corral tree listening on this TCP port (refused for a program corral did not start)")
	f.StringVar(&backend, "backend", targets.Default, "with --port: the backend whose port it is: "+targets.Help)
	return cmd
}

// killIDs kills each process of ids, and returns the results of the kills
// that reached a process (one that failed part way still has one) and an
// error naming each that failed.
func killIDs(ctx context.Context, c *daemon.Client, ids []string, opts registry.KillOptions) ([]registry.KillResult, []error) {
	var results []registry.KillResult
	var errs []error
	for _, id := range ids {
		r, err := c.Kill(ctx, id, opts)
		if errors.Is(err, registry.ErrInvalidOptions) {
			// The registry refused the options, which are every kill's:
			// once is enough, for no process was signalled.
			return results, []error{err}
		}
		if err != nil && !r.Unreachable {
			// An unreachable one's result says it all (reportKills).
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
		}
		if err != nil && r.ID == "" {
			continue
		}
		results = append(results, r)
	}
	return results, errs
}

// reportKills prints what a kill did (a JSON array, never null, with
// --json) and turns its failures into the command's error. Processes whose
// backend did not answer have their line (not killed, kill pending) and
// one error for all of them, not one each repeating it.
func reportKills(stdout io.Writer, results []registry.KillResult, errs []error, asJSON bool) error {
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
	if n := unreachable(results); n > 0 {
		errs = append(errs, fmt.Errorf("%d %s not killed: %s backend does not answer; %s pending (corral ps shows %s; a kill_finished event in corral events tells how %s)",
			n, plural(n, "process", "processes"), plural(n, "its", "their"), plural(n, "the kill is", "the kills are"),
			plural(n, "it", "them"), plural(n, "it ends", "they end")))
	}
	if len(errs) > 0 {
		return daemonError("kill", errs...)
	}
	return nil
}

// unreachable counts the results of processes whose backend did not
// answer.
func unreachable(results []registry.KillResult) int {
	n := 0
	for _, r := range results {
		if r.Unreachable {
			n++
		}
	}
	return n
}

// killLine is one kill's outcome for a person: what was sent, whether
// SIGKILL had to follow, how many processes it ended, and what is left.
func killLine(r registry.KillResult) string {
	status := string(r.State)
	if r.Status != nil {
		status = r.Status.String()
	}
	ended := fmt.Sprintf("%d %s ended", r.Ended, plural(r.Ended, "process", "processes"))
	switch {
	case r.Unreachable:
		return fmt.Sprintf("%s NOT killed, unreachable: %s; the kill is pending and runs when the backend answers again", r.ID, r.Detail)
	case len(r.Survivors) > 0:
		return fmt.Sprintf("%s NOT fully killed: %s, survivors %v", r.ID, ended, r.Survivors)
	case r.AlreadyExited && r.Signal == "":
		return fmt.Sprintf("%s already exited (%s)", r.ID, status)
	case r.AlreadyExited:
		// The leader had exited; what it left running got the signal.
		how := string(r.Signal)
		if r.Escalated {
			how += ", then SIGKILL after the grace period"
		}
		if r.StillRunning {
			return fmt.Sprintf("%s had already exited (%s); sent %s to what it left running, which still runs after the grace period", r.ID, status, how)
		}
		return fmt.Sprintf("%s had already exited (%s); killed what it left running: %s, %s", r.ID, status, how, ended)
	case r.StillRunning:
		return fmt.Sprintf("%s signalled: %s; still running after the grace period (%s)", r.ID, r.Signal, ended)
	case r.Escalated:
		return fmt.Sprintf("%s killed: %s, then SIGKILL after the grace period; %s (%s)", r.ID, r.Signal, ended, status)
	}
	return fmt.Sprintf("%s killed: %s; %s (%s)", r.ID, r.Signal, ended, status)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
