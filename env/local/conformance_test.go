package local

import (
	"testing"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
)

func newTestEnv(t *testing.T, disableCgroup bool) *Env {
	t.Helper()
	e, err := New(Options{StateDir: t.TempDir(), DisableCgroup: disableCgroup})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestConformance runs the shared suite with the mechanism this machine
// offers (cgroup v2 where usable), pipes and PTY.
func TestConformance(t *testing.T) {
	envtest.Run(t, envtest.Config{
		New: func(t *testing.T) env.Environment { return newTestEnv(t, false) },
		PTY: true,
	})
}

// TestConformanceNoCgroup runs the suite again on the pgroup+scan fallback,
// so its tree kill (escapees, daemons) is held to the same standard.
func TestConformanceNoCgroup(t *testing.T) {
	envtest.Run(t, envtest.Config{
		New: func(t *testing.T) env.Environment { return newTestEnv(t, true) },
		PTY: true,
	})
}
