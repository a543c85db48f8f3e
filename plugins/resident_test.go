package plugins_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/plugins"
)

// A plugin that brings only a transport (sdk.ServeTransport) runs the
// env/nohup engine inside the plugin process, next to its transport: the
// host speaks the Backend protocol, the engine calls the transport in
// process. So a transport that implements nohup.ShellTransport gets
// resident shells without anything crossing the plugin boundary. These
// tests check that through the built bwrap example, whose transport enters
// the sandbox with nsenter for an Exec and for a resident shell alike: a
// logging nsenter first on the plugin's PATH counts both.

// enterCounter counts the plugin's entries into its sandbox.
type enterCounter struct{ log string }

// countEntries returns plugin options whose PATH starts with a logging
// nsenter, and the counter that reads its log.
func countEntries(t *testing.T) (plugins.Options, enterCounter) {
	t.Helper()
	real, err := exec.LookPath("nsenter")
	if err != nil {
		t.Skip("no nsenter")
	}
	dir := t.TempDir()
	c := enterCounter{log: filepath.Join(dir, "entries")}
	// A resident shell's script is the engine's library and its request
	// loop, corral_serve; an Exec's is one call.
	wrapper := "#!/bin/sh\nfor last; do :; done\ncase $last in\n" +
		"*corral_serve*) echo shell >>'" + c.log + "' ;;\n" +
		"*) echo exec >>'" + c.log + "' ;;\nesac\n" +
		"exec '" + real + "' \"$@\"\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nsenter"), []byte(wrapper), 0o755))
	opts := testOptions()
	opts.Env = []string{"PATH=" + dir + ":" + os.Getenv("PATH")}
	return opts, c
}

// counts returns how many resident shells were opened and how many Execs
// ran so far.
func (c enterCounter) counts(t *testing.T) (shells, execs int) {
	t.Helper()
	b, err := os.ReadFile(c.log)
	require.True(t, err == nil || os.IsNotExist(err), fmt.Sprintln(err))
	for _, line := range strings.Fields(string(b)) {
		if line == "shell" {
			shells++
		} else {
			execs++
		}
	}
	return shells, execs
}

// TestBwrapResidentShells: once a resident shell runs, starting `true` and
// waiting for it costs no Exec and no new shell: the start, its exit
// status (brought back by the start's own round trip) and the release all
// run as requests on the resident.
func TestBwrapResidentShells(t *testing.T) {
	requireBwrap(t)
	opts, entries := countEntries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := plugins.Open(ctx, namedSandbox(t), opts)
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	runTrue := func() {
		t.Helper()
		p, err := e.Start(ctx, env.Spec{Command: "true"})
		require.NoError(t, err)
		if st, err := p.Wait(ctx); err != nil || !st.Success() {
			require.FailNow(t, fmt.Sprintf("wait = %v, %v", st, err))
		}
		p.Release()
	}
	runTrue() // opens the first resident shell
	shells0, execs0 := entries.counts(t)
	require.Truef(t, shells0 != 0, "no resident shell opened (entries: %d execs); is corral_serve still the engine's resident loop?", execs0)
	const n = 20
	for range n {
		runTrue()
	}
	shells, execs := entries.counts(t)
	t.Logf("sandbox entries: %d resident shells, %d execs before; %d and %d after %d more runs of true",
		shells0, execs0, shells, execs, n)
	assert.Truef(t, execs == execs0, "%d runs of true cost %d Execs; want none, every call on a resident shell", n, execs-execs0)
	assert.Truef(t, shells == shells0, "%d runs of true, one after the other, opened %d more resident shells; want them reused", n, shells-shells0)
}
