package local

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/shellquote"
)

// TestEnvListenersSeesHolder: the machine's listeners include the test's
// own socket, with this process as its holder.
func TestEnvListenersSeesHolder(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	e := newTestEnvIn(t, t.TempDir(), true)
	ls, err := e.Listeners(testCtx(t))
	require.NoError(t, err)
	var found *env.Listener
	for i := range ls {
		if ls[i].Port == port && ls[i].Addr == "127.0.0.1" {
			found = &ls[i]
		}
	}
	require.NotNil(t, found, "port %d not among %v", port, ls)
	assert.Equal(t, os.Getpid(), found.PID)
	assert.NotEmpty(t, found.Command)
}

// TestDetachedListeners: a detached process's tree (run by the shim) is
// seen as well as a child's (which the conformance suite covers).
func TestDetachedListeners(t *testing.T) {
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("busybox not installed (Debian: busybox-static)")
	}
	mechanisms(t, func(t *testing.T, disableCgroup bool) {
		e := newTestEnv(t, disableCgroup)
		port := freePort(t)
		p := start(t, e, env.Spec{
			Command: shellquote.Quote(busybox) + " httpd -f -p 127.0.0.1:" + strconv.Itoa(port) + " -h " + shellquote.Quote(t.TempDir()) + " & wait",
			Detach:  true,
		})
		pl := p.(env.PortLister)
		require.Eventually(t, func() bool {
			ls, err := pl.Listeners(testCtx(t))
			require.NoError(t, err)
			return len(ls) == 1 && ls[0].Port == port && ls[0].PID != p.PID() && ls[0].PID != 0
		}, condWait, condPoll)
		require.NoError(t, p.Signal(testCtx(t), env.SIGKILL))
		wait(t, p)
		require.Eventually(t, func() bool {
			ls, err := pl.Listeners(testCtx(t))
			require.NoError(t, err)
			return len(ls) == 0
		}, condWait, condPoll)
	})
}

// freePort asks the kernel for a port nobody listens on now.
func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
