package integration

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/internal/procstat"
)

// TestDaemonEndsWithItsOwner: a daemon auto-started by a command that
// carries CORRAL_OWNER_PID lives for that process; when the owner is
// killed with SIGKILL (a test binary's timeout, a crashed agent runtime),
// the daemon kills its process trees and exits, leaving nothing behind.
func TestDaemonEndsWithItsOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the corral binary")
	}
	owner := exec.Command("sleep", "600")
	require.NoError(t, owner.Start())
	t.Cleanup(func() { _ = owner.Process.Kill(); _ = owner.Wait() })

	h := newDaemonHome(t, buildCorral(t))
	h.env = append(h.env, daemon.OwnerEnv+"="+strconv.Itoa(owner.Process.Pid))
	m := cliSleepMarker(t)
	id := strings.TrimSpace(h.mustRun("start", "--", "sleep "+m))
	require.NotEmpty(t, id)
	cliRequireMarkerRunning(t, m, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := daemon.NewClient(h.socket)
	defer c.CloseIdle()
	st, err := c.Status(ctx)
	require.NoError(t, err)
	d, err := procstat.Identify(st.PID)
	require.NoError(t, err, "the daemon runs")

	require.NoError(t, owner.Process.Signal(syscall.SIGKILL))
	_ = owner.Wait()
	require.Eventually(t, func() bool { return !d.Alive() }, time.Minute, 100*time.Millisecond, "the daemon (pid %d) ends once its owner has", st.PID)
	cliRequireMarkerGone(t, m)
}
