package local

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

// A Spec's Environ (the caller's environment) replaces the supervisor's
// as the command's base, plain, on a PTY and detached alike; Env still
// applies on top, and each name reaches the command once, with its last
// value, even through the shim, which passes the environment to the
// kernel as it is.
func TestSpecEnvironReplacesTheBase(t *testing.T) {
	e, err := New(Options{StateDir: t.TempDir(), Environ: []string{"PATH=/usr/bin:/bin", "DAEMON_ONLY=leak"}})
	require.NoError(t, err)
	defer e.Close()
	environ := []string{"PATH=/usr/bin:/bin", "VIRTUAL_ENV=/caller/venv", "TWICE=first", "TWICE=second", shimEnvVar + "=1:/tmp"}
	for _, spec := range []env.Spec{
		{Command: "env", Environ: environ, Env: []string{"EXTRA=x", "VIRTUAL_ENV=/explicit"}},
		{Command: "env", Environ: environ, Env: []string{"EXTRA=x", "VIRTUAL_ENV=/explicit"}, PTY: &env.WindowSize{Rows: 24, Cols: 200}},
		{Command: "env", Environ: environ, Env: []string{"EXTRA=x", "VIRTUAL_ENV=/explicit"}, Detach: true},
	} {
		out := strings.ReplaceAll(readAll(t, start(t, e, spec), 0), "\r\n", "\n")
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if name, _, _ := strings.Cut(line, "="); !strings.HasPrefix(name, "CORRAL_TREE_") && name != "PWD" && name != "SHLVL" && name != "_" {
				got = append(got, line)
			}
		}
		assert.ElementsMatch(t, []string{"PATH=/usr/bin:/bin", "VIRTUAL_ENV=/explicit", "TWICE=second", "EXTRA=x"}, got,
			"pty=%v detach=%v: the command's environment", spec.PTY != nil, spec.Detach)
	}
	// Without Environ, the base applies.
	out := readAll(t, start(t, e, env.Spec{Command: "echo $DAEMON_ONLY"}), 0)
	assert.Equal(t, "leak\n", out)
}

func TestDedupEnv(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{nil, nil},
		{[]string{"A=1", "B=2"}, []string{"A=1", "B=2"}},
		{[]string{"A=1", "B=2", "A=3"}, []string{"A=3", "B=2"}},
		{[]string{"A=1", "A=2", "A=3", "C="}, []string{"A=3", "C="}},
	} {
		assert.Equal(t, tc.want, dedupEnv(tc.in), "dedupEnv(%q)", tc.in)
	}
}
