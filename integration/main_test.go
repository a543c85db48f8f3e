package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/corralhq/corral/daemon"
)

// TestMain gives the whole package a corral user of its own: every corral
// a test runs with this process's environment (corral run, which goes
// through the daemon, and the daemon it auto-starts) finds its socket and
// state under a fresh directory, never the machine user's daemon. Tests
// that need a daemon to themselves use newDaemonHome. At the end, the
// shared daemon, if one was started, is shut down with its processes.
func TestMain(m *testing.M) {
	if os.Getenv(copyRelayEnv) == "1" {
		os.Exit(runCopyRelay())
	}
	if os.Getenv(acpAgentEnv) == "1" {
		os.Exit(runACPAgent())
	}
	os.Exit(runIsolated(m))
}

// packageDir holds what lives as long as the test binary: the shared
// daemon's socket and state, and the corral binary (buildCorral).
var packageDir string

func runIsolated(m *testing.M) int {
	// Short: a unix socket path must fit in 108 bytes.
	root, err := os.MkdirTemp("", "ci")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	defer os.RemoveAll(root)
	packageDir = root
	os.Unsetenv("CORRAL_SOCKET")
	os.Unsetenv("CORRAL_NO_AUTOSTART")
	os.Unsetenv("CORRAL_NO_DAEMON")
	os.Setenv("XDG_RUNTIME_DIR", filepath.Join(root, "r"))
	os.Setenv("XDG_STATE_HOME", filepath.Join(root, "s"))
	// Every daemon the tests start (auto-started ones inherit it) ends
	// with this binary, even when a timeout or a SIGKILL ends it before
	// stopSharedDaemon runs.
	os.Setenv(daemon.OwnerEnv, strconv.Itoa(os.Getpid()))
	defer stopSharedDaemon()
	return m.Run()
}

func stopSharedDaemon() {
	paths, err := daemon.DefaultPaths()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := daemon.NewClient(paths.Socket)
	defer c.CloseIdle()
	if _, err := c.Shutdown(ctx, true); err != nil {
		return // none was started
	}
	for ctx.Err() == nil {
		if _, err := c.Status(ctx); errors.Is(err, daemon.ErrNoDaemon) {
			return
		}
		c.CloseIdle()
		time.Sleep(20 * time.Millisecond)
	}
}
