package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/registry"
)

func newWaitCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		timeout time.Duration
		asJSON  bool
		tree    bool
		ready   bool
	)
	cmd := &cobra.Command{
		Use:   "wait [--timeout DUR] [--tree | --ready] ID",
		Short: "Wait for a background process to end and exit with its exit code",
		Long: `Wait for the process to end and exit with its exit code (128+N when signal N
ended it). Exit 124 when --timeout elapses first (the process keeps running),
125 when its status is unknown (lost) or it never started (failed), 2 for an
unknown ID.

wait returns when the command itself (the leader) exits, even if it left
processes running ('sleep 60 &', a dev server that daemonises). --tree waits
until nothing of the tree is left; the exit code is still the leader's.

--ready waits for a process started with --ready-port, --ready-pattern or
--ready-url to be ready instead: exit 0 once it is (at once if it already
was), 1 when it ended first (its last lines of output follow on stderr),
124 when --timeout elapses first.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout < 0 {
				return usageErrorf("wait: --timeout %s: must not be negative", timeout)
			}
			if ready && tree {
				return usageErrorf("wait: --ready waits for readiness, --tree for the end of the tree: give one of them")
			}
			c, _, err := connect(cmd.Context(), stderr)
			if err != nil {
				return err
			}
			if ready {
				return waitReady(cmd.Context(), c, args[0], timeout, asJSON, stdout, stderr)
			}
			wait := c.Wait
			if tree {
				wait = c.WaitTree
			}
			in, err := wait(cmd.Context(), args[0], timeout)
			wr := daemon.WaitResponse{Info: in, TimedOut: errors.Is(err, registry.ErrWaitTimeout)}
			if err != nil && !wr.TimedOut {
				return daemonError("wait", err)
			}
			if asJSON {
				printJSON(stdout, wr)
			}
			if wr.TimedOut {
				return &exitError{code: exitTimeout, msg: fmt.Sprintf("wait: %s still %s after %s", wr.ID, wr.Info.StateText(), timeout)}
			}
			if wr.Status == nil {
				return &exitError{code: exitCorralError, msg: fmt.Sprintf("wait: %s ended %s without an exit status: %s", wr.ID, wr.State, wr.Reason)}
			}
			if wr.State == registry.StateKilled && !asJSON {
				fmt.Fprintf(stderr, "corral: %s was killed (%s)\n", wr.ID, wr.Status)
			}
			if asJSON {
				return exitFor(*wr.Status)
			}
			return exitForInfo(wr.Info)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (exit 124); 0 waits forever")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the final state as JSON")
	cmd.Flags().BoolVar(&tree, "tree", false, "also wait until every process the command left running has ended")
	cmd.Flags().BoolVar(&ready, "ready", false, "wait until the process is ready (exit 0), not until it ends; exit 1 if it ends first")
	return cmd
}

// readyTailLines is how many lines of output wait --ready shows of a
// process that ended before it was ready: enough for the error that
// ended it.
const readyTailLines = 20

// waitReady is wait --ready.
func waitReady(ctx context.Context, c *daemon.Client, id string, timeout time.Duration, asJSON bool, stdout, stderr io.Writer) error {
	in, err := c.WaitReady(ctx, id, timeout)
	wr := daemon.WaitResponse{Info: in, TimedOut: errors.Is(err, registry.ErrWaitTimeout)}
	if err != nil && !wr.TimedOut {
		return daemonError("wait", &procError{id: id, err: err})
	}
	if asJSON {
		printJSON(stdout, wr)
	}
	switch {
	case wr.TimedOut:
		return &exitError{code: exitTimeout, msg: fmt.Sprintf("wait: %s not ready after %s (%s)", procName(in), timeout, in.StateText())}
	case !in.ReadyAt.IsZero():
		return nil
	}
	// It ended first: say how, then what it printed last, which usually
	// says why (a port in use, a syntax error).
	fmt.Fprintf(stderr, "corral: %s ended before it was ready: %s\n", procName(in), in.StateText())
	if lr, err := c.Log(ctx, in.ID, registry.LogOptions{Limit: readyTailLines, Strip: true}); err == nil {
		for _, line := range lr.Lines {
			fmt.Fprintln(stderr, line)
		}
	}
	return &exitError{code: exitFailure}
}
