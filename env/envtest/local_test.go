package envtest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
	"github.com/corralhq/corral/env/local"
)

// TestSuiteOnLocal runs the suite against the real local backend: the
// suite's own check that its cases pass on a real implementation (env/local
// runs it too, with and without cgroups).
func TestSuiteOnLocal(t *testing.T) {
	// One state directory for all Environments: re-attach needs the second
	// Environment to see what the first one started.
	stateDir := t.TempDir()
	envtest.Run(t, envtest.Config{
		SignalBaseline: envtest.LocalSignalBaseline,
		New: func(t *testing.T) env.Environment {
			e, err := local.New(local.Options{StateDir: stateDir})
			require.NoError(t, err)
			return e
		},
		PTY: true,
	})
}

// TestSuiteOwnSandbox runs the re-attach cases (Config.Only) against
// Environments that each have a sandbox of their own — for env/local, a
// state directory per Environment, so a second Environment could not see
// what the first started — with Config.OwnSandbox: they attach from the
// Environment that started the process, and pass.
func TestSuiteOwnSandbox(t *testing.T) {
	envtest.Run(t, envtest.Config{
		OwnSandbox: true,
		Only:       []string{"Reattach"},
		New: func(t *testing.T) env.Environment {
			e, err := local.New(local.Options{StateDir: t.TempDir()})
			require.NoError(t, err)
			return e
		},
	})
}
