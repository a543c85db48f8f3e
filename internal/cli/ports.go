package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/targets"
	"github.com/corralhq/corral/registry"
)

const portsLong = `List every TCP port that something listens on in a backend (the local
machine, a container, a host), with its owner: the corral process whose tree
holds the socket (ID and name), or "-" when corral did not start its holder;
PID and COMMAND name the process that holds it either way.

corral kill --port N kills the corral tree that owns port N, and refuses for
a port that another program holds.`

func newPortsCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		backend string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:     "ports [--backend B]",
		Short:   "List the listening TCP ports of a backend and who owns each",
		Long:    portsLong,
		Example: "  corral ports\n  corral ports --backend docker://sandbox --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkBackend(backend); err != nil {
				return usageErrorf("ports: %v", err)
			}
			c, _, err := connect(cmd.Context(), stderr)
			if err != nil {
				return err
			}
			list, err := c.Ports(cmd.Context(), backend)
			if err != nil {
				return daemonError("ports", err)
			}
			if asJSON {
				if list == nil {
					list = []registry.PortInfo{}
				}
				return printJSON(stdout, list)
			}
			writePorts(stdout, list)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&backend, "backend", targets.Default, "which backend's ports: "+targets.Help)
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func writePorts(w io.Writer, list []registry.PortInfo) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PORT\tADDR\tPID\tOWNER\tCOMMAND")
	for _, p := range list {
		pid := "-"
		if p.PID > 0 {
			pid = fmt.Sprint(p.PID)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", p.Port, p.Addr, pid, portOwner(p), orDash(clipCommand(p.Command, 60)))
	}
	tw.Flush()
}

// portOwner is the corral process that owns a socket, "-" for none.
func portOwner(p registry.PortInfo) string {
	if p.ID == "" {
		return "-"
	}
	return procName(registry.Info{ID: p.ID, Name: p.Name})
}

// killPort is kill --port: the registry kills the corral trees that listen
// on port in backend (Service.KillPort); the CLI reports them, and refuses,
// with exitFailure, a port held by a program corral did not start, naming
// it, or one that nothing listens on.
func killPort(ctx context.Context, c *daemon.Client, backend string, port int, opts registry.KillOptions, asJSON bool, stdout io.Writer) error {
	res, err := c.KillPort(ctx, backend, port, opts)
	if err != nil && len(res.Killed) == 0 {
		return daemonError("kill", err)
	}
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	if err := reportKills(stdout, res.Killed, errs, asJSON); err != nil {
		return err
	}
	switch {
	case len(res.Foreign) > 0:
		p := res.Foreign[0]
		holder := "a process corral cannot see"
		if p.PID > 0 {
			holder = fmt.Sprintf("pid %d (%s)", p.PID, orDash(clipCommand(p.Command, 80)))
		}
		return &exitError{code: exitFailure, msg: fmt.Sprintf("kill: port %d is held by %s, which corral did not start; kill it yourself", port, holder)}
	case len(res.Killed) == 0:
		return &exitError{code: exitFailure, msg: fmt.Sprintf("kill: nothing listens on port %d%s", port, inBackend(backend))}
	}
	return nil
}

// inBackend names a backend other than the default in a message.
func inBackend(backend string) string {
	if backend == "" || backend == targets.Default {
		return ""
	}
	return " in " + backend
}

// checkPort is ValidatePort's verdict as a usage error.
func checkPort(op, flag string, port int) error {
	if err := env.ValidatePort(port); err != nil {
		return usageErrorf("%s: %s %d: %s", op, flag, port, specReason(err))
	}
	return nil
}
