package local

import (
	"testing"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
)

// newTestEnvIn returns an Env on stateDir; Envs sharing it can attach to
// each other's detached processes.
func newTestEnvIn(t *testing.T, stateDir string, disableCgroup bool) *Env {
	t.Helper()
	e, err := New(Options{StateDir: stateDir, DisableCgroup: disableCgroup})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// TestConformance runs the shared suite with the mechanism this machine
// offers (cgroup v2 where usable), pipes and PTY.
func TestConformance(t *testing.T) {
	// One state directory for the whole run: the re-attach cases attach
	// from a second Environment.
	stateDir := t.TempDir()
	envtest.Run(t, envtest.Config{
		SignalBaseline: envtest.LocalSignalBaseline,
		New:            func(t *testing.T) env.Environment { return newTestEnvIn(t, stateDir, false) },
		PTY:            true,
	})
}

// TestConformanceNoCgroup runs the suite again on the pgroup+scan fallback,
// so its tree kill (escapees, daemons) is held to the same standard.
func TestConformanceNoCgroup(t *testing.T) {
	stateDir := t.TempDir()
	envtest.Run(t, envtest.Config{
		SignalBaseline: envtest.LocalSignalBaseline,
		New:            func(t *testing.T) env.Environment { return newTestEnvIn(t, stateDir, true) },
		PTY:            true,
	})
}
