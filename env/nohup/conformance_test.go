package nohup_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
	"github.com/corralhq/corral/env/nohup"
	"github.com/corralhq/corral/env/nohup/nohuptest"
)

// TestConformance runs the shared suite against the engine on the local
// transport with every call an exec, once per shell (dash as /bin/sh, bash,
// busybox ash with only busybox applets in PATH). All Environments of one
// shell share a base dir, as Environments on one sandbox do, so re-attach
// works across them.
//
// This path runs the groups every call goes through (envtest.TransportSkip):
// the tree, signal, leftover, re-attach and PTY cases test the engine's
// shell library, which is the same on both paths, and run on every shell in
// TestConformanceResident, the path docker and ssh use. Running the whole
// suite on both paths made this package 21 minutes of a loaded CI run.
func TestConformance(t *testing.T) {
	for _, sh := range nohuptest.Shells(t) {
		t.Run(sh.Name, func(t *testing.T) {
			base := t.TempDir() + "/state"
			tr := &nohuptest.Local{Shell: sh.Path, Env: sh.Env}
			conformance(t, sh, base, tr, envtest.TransportSkip())
		})
	}
}

// TestConformanceResident runs the suite with every call but Write on
// resident shells (nohup.Resident), as env/ssh runs them, once per shell.
func TestConformanceResident(t *testing.T) {
	for _, sh := range nohuptest.Shells(t) {
		t.Run(sh.Name, func(t *testing.T) {
			base := t.TempDir() + "/state"
			tr := &nohuptest.Local{Shell: sh.Path, Env: sh.Env, Resident: true}
			// Cleanups run after the suite's parallel subtests.
			t.Cleanup(func() {
				assert.True(t, tr.Residents() != 0, "no resident shell was started: the suite ran without them")
			})
			conformance(t, sh, base, tr, nil)
		})
	}
}

// loadCases are the suite's load tests. They exercise the engine's
// concurrency and throughput, not the shell's dialect, so each mode runs
// them on /bin/sh only: on every shell they took two thirds of the
// package's CI time (env/docker runs them on busybox too).
var loadCases = map[string]string{
	"Output/Large50MB":         "run on /bin/sh in this mode; the shell does not change the throughput path",
	"Exit/KillRacesExit100":    "run on /bin/sh in this mode; the race is the engine's, not the shell's",
	"Exit/ConcurrentStarts100": "run on /bin/sh in this mode; the race is the engine's, not the shell's",
}

func conformance(t *testing.T, sh nohuptest.Shell, base string, tr *nohuptest.Local, skip map[string]string) {
	if skip == nil {
		skip = map[string]string{}
	}
	if sh.Name != "sh" {
		for name, why := range loadCases {
			if _, ok := skip[name]; !ok {
				skip[name] = why
			}
		}
	}
	envtest.Run(t, envtest.Config{
		// The busybox variant's PATH has no util-linux script, so no
		// terminal (TestPTYMissing checks that Start says so).
		PTY:            sh.Name != "busybox-ash",
		Skip:           skip,
		SignalBaseline: envtest.LocalSignalBaseline,
		New: func(t *testing.T) env.Environment {
			e, err := nohup.New(tr, nohup.Options{Name: "local-" + sh.Name, BaseDir: base, Shell: sh.Path})
			require.NoError(t, err)
			return e
		},
	})
}
