package cli

import (
	"io"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"

	"github.com/corralhq/corral/internal/backends"
)

// testEngine is corrald's engine without its own commands (they live in
// internal/engine, which imports this package): these tests run
// --no-daemon and serve in process.
var testEngine = &Engine{
	Check: backends.Check,
	DaemonOpen: func(d DaemonBackends) (OpenFunc, error) {
		return backends.DaemonOpen(d.StateDir, d.IdleClose, d.LogMax, d.Ceiling)
	},
	PrivateOpen:         backends.PrivateOpen,
	WaitSandboxRemovals: backends.WaitSandboxRemovals,
	Commands:            func(io.Reader, io.Writer, io.Writer) []*cobra.Command { return nil },
}

// The thin command's help lists the targets the engine accepts.
func TestBackendHelpIsTheEngines(t *testing.T) {
	assert.Equal(t, backends.Help, backendHelp)
}
