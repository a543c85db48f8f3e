package envtest_test

import (
	"testing"

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
			if err != nil {
				t.Fatal(err)
			}
			return e
		},
		PTY: true,
	})
}
