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
	Check:               backends.Check,
	DaemonOpen:          backends.DaemonOpen,
	PrivateOpen:         backends.PrivateOpen,
	WaitSandboxRemovals: backends.WaitSandboxRemovals,
	Commands:            func(io.Reader, io.Writer, io.Writer) []*cobra.Command { return nil },
}

// TestThinWithoutCorrald: the thin corral (no engine) hands mcp, serve
// and run --no-daemon to corrald; where none is installed it says so in
// one line with how to install it, exit 125, and runs nothing.
func TestThinWithoutCorrald(t *testing.T) {
	SetEngine(nil)
	t.Cleanup(func() { SetEngine(testEngine) })
	t.Setenv("PATH", t.TempDir())
	for _, args := range [][]string{{"mcp"}, {"doctor"}, {"serve"}, {"run", "--no-daemon", "--", "true"}} {
		code, out, errOut := corral(t, "", args...)
		assert.Equal(t, exitCorralError, code, "%q: stderr %q", args, errOut)
		assert.Empty(t, out, "%q", args)
		assert.Regexp(t, `^corral: \w+: corrald is not beside corral nor on PATH: install both with go install github.com/corralhq/corral/cmd/\.\.\.@latest \(or make build\)\n$`, errOut, "%q", args)
	}
	// Without the engine, the check of a target is the syntax's alone:
	// the daemon does the rest.
	assert.NoError(t, checkBackend("nosuch://x"))
	assert.ErrorContains(t, checkBackend("no where"), `backend "no where" not available`)
}
