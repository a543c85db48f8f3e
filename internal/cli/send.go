package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

func newSendCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		noNewline bool
		eof       bool
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "send [--no-newline] ID TEXT | send --eof ID [TEXT]",
		Short: "Write to a background process's stdin (started with --stdin or --pty)",
		Long: `Write TEXT and a newline to the process's stdin ("\r", the Enter key, on a
PTY would need --no-newline and a literal carriage return). --eof closes
stdin afterwards (with or without TEXT), so the process reads end of file.`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case eof && (len(args) < 1 || len(args) > 2):
				return usageErrorf("send --eof: give ID and optionally TEXT")
			case !eof && len(args) != 2:
				return usageErrorf("send: give ID and TEXT (quote TEXT with spaces)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			if len(args) == 2 {
				data = []byte(args[1])
				if !noNewline {
					data = append(data, '\n')
				}
			}
			c, _, err := connect(cmd.Context(), stderr)
			if err != nil {
				return err
			}
			if err := c.Send(cmd.Context(), args[0], data, eof); err != nil {
				return daemonError("send", err)
			}
			if asJSON {
				return printJSON(stdout, map[string]any{"id": args[0], "written": len(data), "eof": eof})
			}
			if eof {
				fmt.Fprintf(stderr, "corral: stdin of %s closed\n", args[0])
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&noNewline, "no-newline", "n", false, "do not append a newline to TEXT")
	cmd.Flags().BoolVar(&eof, "eof", false, "close stdin after writing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}
