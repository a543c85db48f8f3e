// Package engine is corrald's half of the command line: the backends
// (internal/backends) and the commands that host them in process (mcp,
// acp, doctor, backends). The thin corral hands these to corrald.
package engine

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/internal/backends"
	"github.com/corralhq/corral/internal/cli"
)

// New is the engine corrald installs (cli.SetEngine).
func New() *cli.Engine {
	return &cli.Engine{
		Check:               backends.Check,
		DaemonOpen:          backends.DaemonOpen,
		PrivateOpen:         backends.PrivateOpen,
		WaitSandboxRemovals: backends.WaitSandboxRemovals,
		Commands: func(stdin io.Reader, stdout, stderr io.Writer) []*cobra.Command {
			return []*cobra.Command{
				newMCPCommand(stdin, stdout, stderr),
				newACPCommand(stdin, stdout, stderr),
				newDoctorCommand(stdout, stderr),
				newBackendsCommand(stdout),
			}
		},
	}
}
