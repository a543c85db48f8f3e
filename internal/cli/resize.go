package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/env"
)

func newResizeCommand(stdout, stderr io.Writer) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "resize ID ROWSxCOLS",
		Short: "Change the terminal size of a background process started with --pty",
		Long: `Change the window size of a background process's terminal, for example
"corral resize proc_1234 40x120". The process gets SIGWINCH, as in a terminal
window that was resized. Works after a daemon restart too.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			rows, cols, err := parseWindowSize(args[1])
			if err != nil {
				return usageErrorf("resize: %v", err)
			}
			c, _, err := connect(cmd.Context(), stderr)
			if err != nil {
				return err
			}
			if err := c.Resize(cmd.Context(), args[0], env.WindowSize{Rows: rows, Cols: cols}); err != nil {
				return daemonError("resize", err)
			}
			if asJSON {
				return printJSON(stdout, map[string]any{"id": args[0], "rows": rows, "cols": cols})
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// parseWindowSize reads ROWSxCOLS, each 1 to 65535.
func parseWindowSize(s string) (rows, cols uint16, err error) {
	r, c, ok := strings.Cut(strings.ToLower(s), "x")
	if !ok {
		return 0, 0, fmt.Errorf("size %q: give ROWSxCOLS, such as 40x120", s)
	}
	rn, rerr := strconv.ParseUint(r, 10, 16)
	cn, cerr := strconv.ParseUint(c, 10, 16)
	if rerr != nil || cerr != nil || rn == 0 || cn == 0 {
		return 0, 0, fmt.Errorf("size %q: rows and columns must be whole numbers from 1 to 65535, such as 40x120", s)
	}
	return uint16(rn), uint16(cn), nil
}
