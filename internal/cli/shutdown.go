package cli

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/daemon"
)

func newShutdownCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		killAll bool
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "shutdown [--kill-all]",
		Short: "Stop the corral daemon; background processes keep running unless --kill-all",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := daemonUnavailable(); err != nil {
				return err
			}
			paths, err := daemon.DefaultPaths()
			if err != nil {
				return &exitError{code: exitCorralError, msg: err.Error()}
			}
			c := daemon.NewClient(paths.Socket)
			st, err := c.Status(cmd.Context())
			if errors.Is(err, daemon.ErrNoDaemon) {
				if asJSON {
					return printJSON(stdout, map[string]any{"running": false})
				}
				fmt.Fprintln(stderr, "corral: no daemon is running")
				return nil
			}
			if err != nil {
				return daemonError("shutdown", err)
			}
			resp, err := c.Shutdown(cmd.Context(), killAll)
			if err != nil {
				return daemonError("shutdown", err)
			}
			// Done when the socket no longer answers.
			deadline := time.Now().Add(30 * time.Second)
			for {
				if _, err := c.Status(cmd.Context()); errors.Is(err, daemon.ErrNoDaemon) {
					break
				}
				if time.Now().After(deadline) {
					return &exitError{code: exitCorralError, msg: fmt.Sprintf("shutdown: daemon (pid %d) still answers after 30s", st.PID)}
				}
				c.CloseIdle()
				time.Sleep(20 * time.Millisecond)
			}
			if asJSON {
				return printJSON(stdout, resp)
			}
			for _, r := range resp.Killed {
				fmt.Fprintln(stdout, killLine(r))
			}
			fmt.Fprintf(stderr, "corral: daemon (pid %d) stopped\n", st.PID)
			if n := unreachable(resp.Killed); n > 0 {
				// The state file keeps the pending kills.
				return &exitError{code: exitCorralError, msg: fmt.Sprintf("shutdown: %d %s not killed: %s backend does not answer; the next daemon (any corral command starts it) runs the pending %s once it answers",
					n, plural(n, "process", "processes"), plural(n, "its", "their"), plural(n, "kill", "kills"))}
			}
			if resp.Error != "" {
				return &exitError{code: exitCorralError, msg: "shutdown: " + resp.Error}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&killAll, "kill-all", false, "kill every process tree before stopping")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}
