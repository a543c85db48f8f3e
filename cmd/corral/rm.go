package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

func newRmCommand(stdout, stderr io.Writer) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "rm ID...",
		Short: "Forget finished background processes and delete their output",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, err := connect(cmd.Context(), stderr)
			if err != nil {
				return err
			}
			var removed []string
			var errs []error
			for _, id := range args {
				full, err := c.Remove(cmd.Context(), id)
				if err != nil {
					errs = append(errs, err)
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
				return daemonError("rm", errors.Join(errs...))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the removed IDs as JSON")
	return cmd
}
