package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

func newRmCommand(stdout, stderr io.Writer) *cobra.Command {
	var asJSON, force bool
	cmd := &cobra.Command{
		Use:   "rm [--force] ID...",
		Short: "Forget finished background processes and delete their output",
		Long: `Forget finished background processes and delete their output. A process
whose leader exited while part of its tree still runs (ps: "1 left running")
is refused; --force kills whatever of the process still runs (SIGKILL, whole
tree) and then removes it.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, err := connect(cmd.Context(), stderr)
			if err != nil {
				return err
			}
			var removed []string
			var errs []error
			for _, id := range args {
				full, err := c.RemoveID(cmd.Context(), id, force)
				if err != nil {
					errs = append(errs, &procError{id: id, err: err})
					continue
				}
				removed = append(removed, full)
				if !asJSON {
					fmt.Fprintln(stdout, full)
				}
			}
			if asJSON {
				if removed == nil {
					removed = []string{}
				}
				printJSON(stdout, map[string]any{"removed": removed})
			}
			if len(errs) > 0 {
				return daemonError("rm", errs...)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the removed IDs as JSON")
	cmd.Flags().BoolVar(&force, "force", false, "kill what still runs of the process (whole tree) first")
	return cmd
}
