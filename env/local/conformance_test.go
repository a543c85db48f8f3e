package local

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
)

// newTestEnvIn returns an Env on stateDir; Envs sharing it can attach to
// each other's detached processes.
func newTestEnvIn(t *testing.T, stateDir string, disableCgroup bool) *Env {
	t.Helper()
	e, err := New(Options{StateDir: stateDir, DisableCgroup: disableCgroup})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// TestConformance runs the shared suite with the mechanism this machine
// offers (cgroup v2 where usable), pipes and PTY.
func TestConformance(t *testing.T) {
	skipOnWindows(t)
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
	skipOnWindows(t)
	stateDir := t.TempDir()
	envtest.Run(t, envtest.Config{
		SignalBaseline: envtest.LocalSignalBaseline,
		New:            func(t *testing.T) env.Environment { return newTestEnvIn(t, stateDir, true) },
		PTY:            true,
	})
}

// skipOnWindows skips the shared suite on Windows: it runs POSIX shell
// commands and checks POSIX signals, sessions and /proc. Windows has its
// own tests (*_windows_test.go).
func skipOnWindows(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the shared POSIX suite does not apply on Windows; see the *_windows_test.go tests")
	}
}
