package cli

import (
	"fmt"
	"io"
	"os/exec"

	"github.com/spf13/cobra"
)

const dashboardLong = `Serve the web dashboard from the daemon (starting the daemon if none runs)
and print its URL. The page lists every process live — ID, command, backend,
state, age, PID, labels, with filters — shows the selected one's output as it
is written (a terminal for --pty processes), and kills (TERM, grace, KILL),
force-kills (KILL at once), sends a line to stdin or removes a finished one.

It listens on loopback only (127.0.0.1 and a free port, or --addr). The URL
carries the daemon's access token once; the page trades it for a cookie.
Anyone with the URL can kill your processes: do not share it. The dashboard
runs until the daemon stops; corral dashboard again prints the same URL.
corral serve --http ADDR serves it from the daemon's start.`

func newDashboardCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		addr   string
		open   bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve the web dashboard from the daemon and print its URL",
		Long:  dashboardLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, _, err := connect(ctx, stderr)
			if err != nil {
				return err
			}
			info, err := c.Dashboard(ctx, addr)
			if err != nil {
				return daemonError("dashboard", err)
			}
			if asJSON {
				return printJSON(stdout, info)
			}
			fmt.Fprintln(stdout, info.URL)
			if open {
				// xdg-open reads the URL from its argument vector: no
				// shell sees it.
				if err := exec.Command("xdg-open", info.URL).Start(); err != nil {
					fmt.Fprintf(stderr, "corral: could not open a browser (%v); open the URL above\n", err)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "", "loopback address to serve on when the dashboard is not running yet (default 127.0.0.1 and a free port)")
	f.BoolVar(&open, "open", false, "open the URL in a browser (xdg-open)")
	f.BoolVar(&asJSON, "json", false, "print JSON: url, addr")
	return cmd
}
