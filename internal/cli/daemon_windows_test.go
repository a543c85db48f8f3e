package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWindowsDaemonCommandsSayWhatToUse: every command that needs the
// daemon fails at once with one line naming corral run --no-daemon, not
// with a socket error (under Wine 8.0: "socket: winapi error #10047"), and
// never tries to start a daemon.
func TestWindowsDaemonCommandsSayWhatToUse(t *testing.T) {
	// TestMain sets these for the other tests; here run must go for the
	// daemon, and auto-start is what must not happen.
	t.Setenv(noDaemonEnv, "")
	t.Setenv("CORRAL_NO_AUTOSTART", "")
	for _, args := range [][]string{
		{"ps"},
		{"start", "--", "echo hi"},
		{"run", "--", "echo hi"},
		{"logs", "x"},
		{"kill", "x"},
		{"serve"},
		{"shutdown"},
	} {
		code, out, errOut := corral(t, "", args...)
		require.Equal(t, exitCorralError, code, "%q: stderr %s", args, errOut)
		require.Empty(t, out, "%q", args)
		require.Equal(t, "corral: the corral daemon does not run on Windows yet, and this command needs it: "+
			"run commands with corral run --no-daemon (corral mcp and acp: --in-process)\n", errOut, "%q", args)
		require.Equal(t, 1, strings.Count(errOut, "\n"), "%q", args)
	}
}
