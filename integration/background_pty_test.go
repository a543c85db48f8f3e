package integration

import (
	"strings"
	"testing"

	"github.com/corralhq/corral/registry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBackgroundPTYSurvivesADaemonCrash: a `corral start --pty` process
// keeps running when the daemon is killed with SIGKILL, and the next
// daemon re-attaches it: its output, stdin and window size all work.
func TestBackgroundPTYSurvivesADaemonCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the corral binary")
	}
	h := newDaemonHome(t, buildCorral(t))
	h.startServe()
	bg := &bgBackend{h: h, target: "local"}
	// One reads lines until end of file; the other reports its window
	// size on SIGWINCH (a trap would cut the first one's read short).
	reader := bg.start(t, `stty size; while read -r line; do echo "got $line"; done; echo bye`, "--pty", "--stdin")
	sizer := bg.start(t, `trap 'echo size $(stty size)' WINCH; echo ready; while :; do sleep 0.05; done`, "--pty")
	bg.waitLogs(t, reader, "24 80")
	bg.waitLogs(t, sizer, "ready")
	for _, id := range []string{reader, sizer} {
		require.True(t, bg.info(t, id).Detached, "a background PTY process must be detached to survive the daemon")
	}

	h.crashServe()
	h.startServe()

	for _, id := range []string{reader, sizer} {
		in := bg.info(t, id)
		require.Equal(t, registry.StateRunning, in.State, "re-attached after the crash: %+v", in)
	}
	assert.Contains(t, bg.logs(t, reader), "24 80", "output from before the crash is still there")
	h.mustRun("send", reader, "hello")
	bg.waitLogs(t, reader, "got hello")
	h.mustRun("send", "--eof", reader)
	r := h.run("wait", reader)
	require.Equal(t, 0, r.code, "%+v", r)
	assert.True(t, strings.HasSuffix(strings.TrimRight(bg.logs(t, reader), "\r\n"), "bye"), "output %q", bg.logs(t, reader))

	h.mustRun("resize", sizer, "40x120")
	bg.waitLogs(t, sizer, "size 40 120")
	h.mustRun("kill", sizer)
}
