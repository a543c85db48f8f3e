package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/registry"
)

// corral run goes through the package's shared daemon (TestMain): what it
// runs is listed by corral ps, its connection is the tree's lease, and
// --pty follows the user's terminal size.
func TestRunThroughTheDaemon(t *testing.T) {
	bin := buildCorral(t)

	t.Run("listed as foreground; kill -9 of the client ends the tree", func(t *testing.T) {
		t.Parallel()
		m := cliSleepMarker(t)
		cmd := exec.Command(bin, "run", "--", "sh", "-c", "echo ready; (sleep "+m+" &); sleep "+m)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		line, err := bufio.NewReader(stdout).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "ready\n", line)
		cliRequireMarkerRunning(t, m, 2)

		ours := findListed(t, bin, m)
		require.NotNil(t, ours, "corral ps does not list the running corral run")
		assert.True(t, ours.Foreground)
		assert.Equal(t, registry.StateRunning, ours.State)
		r := runCorral(t, bin, nil, "ps")
		assert.Contains(t, r.stdout, "running (foreground)")

		// As a client killed with -9, or whose terminal vanished with it:
		// no word to the daemon, only its end of the socket closing.
		killed := time.Now()
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		cliRequireMarkerGone(t, m)
		t.Logf("the tree was gone %s after the client's SIGKILL", time.Since(killed).Round(time.Millisecond))
		end := findListed(t, bin, m)
		require.NotNil(t, end)
		assert.Equal(t, registry.StateKilled, end.State)
	})

	t.Run("the terminal size follows the user's", func(t *testing.T) {
		t.Parallel()
		ptmx, tty, err := pty.Open()
		if err != nil {
			t.Skipf("no pseudo-terminal available: %v", err)
		}
		defer ptmx.Close()
		defer tty.Close()
		require.NoError(t, pty.Setsize(ptmx, &pty.Winsize{Rows: 24, Cols: 80}))
		cmd := exec.Command(bin, "run", "--pty", "--stdin", "--", `stty size; while read -r line; do [ "$line" = q ] && exit 0; stty size; done`)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
		require.NoError(t, cmd.Start())
		var out cliTermBuffer
		go func() { _, _ = io.Copy(&out, ptmx) }()
		waitDone := make(chan struct{})
		go func() { _ = cmd.Wait(); close(waitDone) }()
		defer func() {
			select {
			case <-waitDone:
			default:
				_ = cmd.Process.Kill()
				<-waitDone
			}
		}()
		require.Eventually(t, func() bool { return strings.Contains(out.String(), "24 80") },
			time.Minute, 20*time.Millisecond, "no stty size on the terminal: %q", out.String())

		// The kernel tells corral (SIGWINCH); corral resizes the command's
		// terminal. Ask again until the new size shows.
		require.NoError(t, pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 120}))
		require.Eventually(t, func() bool {
			_, _ = ptmx.Write([]byte("\r"))
			return strings.Contains(out.String(), "40 120")
		}, time.Minute, 100*time.Millisecond, "the command's terminal kept its size: %q", out.String())
		_, err = ptmx.Write([]byte("q\r"))
		require.NoError(t, err)
		select {
		case <-waitDone:
		case <-time.After(time.Minute):
			require.FailNow(t, fmt.Sprintf("corral did not exit; terminal shows %q", out.String()))
		}
		assert.Equal(t, 0, cmd.ProcessState.ExitCode())
	})

	t.Run("--no-daemon runs in a registry of its own", func(t *testing.T) {
		t.Parallel()
		m := cliSleepMarker(t)
		for _, how := range []struct {
			env  []string
			args []string
		}{
			{nil, []string{"run", "--no-daemon", "--", "sh", "-c", "sleep 0." + strings.ReplaceAll(m, ".", "") + "; exit 6"}},
			{append(os.Environ(), "CORRAL_NO_DAEMON=1"), []string{"run", "--", "sh", "-c", "sleep 0." + strings.ReplaceAll(m, ".", "") + "; exit 6"}},
		} {
			r := runCorralEnv(t, bin, how.env, nil, how.args...)
			assert.Equal(t, 6, r.code, "stderr %q", r.stderr)
			assert.Nil(t, findListed(t, bin, "0."+strings.ReplaceAll(m, ".", "")), "the daemon ran it")
		}
	})
}

// findListed returns the process of the shared daemon whose command
// contains marker, or nil.
func findListed(t *testing.T, bin, marker string) *registry.Info {
	t.Helper()
	r := runCorral(t, bin, nil, "ps", "--all", "--json")
	require.Equal(t, 0, r.code, "corral ps: %s", r.stderr)
	var list []registry.Info
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list), "corral ps --json: %q", r.stdout)
	for i := range list {
		if strings.Contains(list[i].Command, marker) {
			return &list[i]
		}
	}
	return nil
}

// A daemon killed with -9 under a `corral run` takes the run's lease with
// it: the client says so and exits 125, and the next daemon kills the
// tree it finds (started detached for exactly this) instead of losing
// track of it while it runs on.
func TestRunSurvivesNoDaemonCrash(t *testing.T) {
	h := newDaemonHome(t, buildCorral(t))
	h.startServe()
	m := cliSleepMarker(t)
	cmd := exec.Command(h.bin, "run", "--", "sh", "-c", "echo ready; (sleep "+m+" &); sleep "+m)
	cmd.Env = h.env
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	cliRequireMarkerRunning(t, m, 2)

	h.crashServe()
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "corral run after its daemon died: %v", err)
	assert.Equal(t, 125, ee.ExitCode(), "stderr: %s", stderr.String())
	assert.Contains(t, stderr.String(), "daemon")
	require.Len(t, cliMarkerPIDs(t, m), 2, "the tree runs on while no daemon runs")

	h.startServe() // recovers the state file
	cliRequireMarkerGone(t, m)
	var ours *registry.Info
	for _, in := range h.list("") {
		if strings.Contains(in.Command, m) {
			ours = &in
		}
	}
	require.NotNil(t, ours, "the new daemon does not list the foreground process")
	assert.Equal(t, registry.StateKilled, ours.State)
	assert.Contains(t, ours.Reason, "foreground")
}
