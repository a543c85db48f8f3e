package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/internal/testing/winsh"
)

// The Windows tests of the CLI run `corral run --no-daemon` in process and,
// for what only a real process shows (its exit code, being killed), as
// this test binary copied to corral.exe. The commands run under the test
// binary copied to sh.exe (winsh), whose members report their PIDs; the
// checks read a toolhelp snapshot, never corral's job objects. All tests
// are named TestWindows so a Wine run can select them with -test.run.

func init() {
	// Started as corral.exe, this binary is corral; as sh.exe, the shell.
	if len(os.Args) > 0 && strings.EqualFold(filepath.Base(os.Args[0]), "corral.exe") {
		SetEngine(testEngine) // corrald's: --no-daemon runs in process
		os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	winsh.MainIfShell()
}

// windowsBin returns a directory, first in PATH for the test, holding this
// binary as sh.exe (always: the commands use winsh's built-ins, which a
// real sh lacks) and, when asked, as corral.exe.
func windowsBin(t *testing.T, withCorral bool) string {
	t.Helper()
	dir := tempDir(t)
	t.Setenv("PATH", os.Getenv("PATH")) // restored after the test
	// The local backend makes its state directory even for a private
	// registry: in the test's, not in the user profile.
	t.Setenv("XDG_STATE_HOME", tempDir(t))
	_, err := winsh.Install(dir)
	require.NoError(t, err)
	if withCorral {
		sh := filepath.Join(dir, "sh.exe")
		data, err := os.ReadFile(sh)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "corral.exe"), data, 0o755))
	}
	return dir
}

// tempDir is t.TempDir without its os.RemoveAll, which fails under Wine
// 8.0 on a directory that is not empty.
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "corral-win-")
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := winsh.RemoveTree(dir); err != nil {
			t.Errorf("clean up: %v", err)
		}
	})
	return dir
}

// treeLine is a tree of four members that each report their PID into the
// working directory: the leader, a child that exits after starting a
// grandchild (orphaned then), that grandchild, and a second child. All
// but the first child sleep for a minute.
const treeLine = `pid .; spawn 'pid .; spawn "pid .; sleep 60"; exit 0'; spawn 'pid .; sleep 60'; sleep 60`

const treeMembers = 4

func TestWindowsRunExitCodesOutputAndStdin(t *testing.T) {
	windowsBin(t, false)
	cases := []struct {
		args []string
		code int
		out  string // stdout and stderr of the command, merged
	}{
		{[]string{"echo hello; exit 3"}, 3, "hello\n"},
		{[]string{"echo ok"}, 0, "ok\n"},
		{[]string{"exit 1"}, 1, ""},
		{[]string{"nosuchcommand"}, 127, "sh: nosuchcommand: not found\n"},
		// Several words are quoted one by one, as for sh.
		{[]string{"echo", "two  spaces", "it;s"}, 0, "two  spaces it;s\n"},
	}
	for _, c := range cases {
		args := append([]string{"run", "--no-daemon", "--"}, c.args...)
		code, out, errOut := corral(t, "", args...)
		require.Equal(t, c.code, code, "%q: stderr %s", c.args, errOut)
		require.Equal(t, c.out, out, "%q", c.args)
		require.Empty(t, errOut, "%q", c.args)
	}
	code, out, errOut := corral(t, "data\nmore\n", "run", "--no-daemon", "--stdin", "--", "cat; echo end")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "data\nmore\nend\n", out)
}

func TestWindowsRunTimeoutKillsTheTree(t *testing.T) {
	windowsBin(t, false)
	work := tempDir(t)
	for _, flag := range []string{"--timeout", "--idle-timeout"} {
		t.Run(flag, func(t *testing.T) {
			pids := filepath.Join(work, strings.TrimLeft(flag, "-"))
			require.NoError(t, os.Mkdir(pids, 0o755))
			began := time.Now()
			// Long enough for four processes to start under Wine.
			code, _, errOut := corral(t, "", "run", "--no-daemon", flag, "4s", "--dir", pids, "--", treeLine)
			took := time.Since(began)
			require.Equal(t, exitTimeout, code, "stderr: %s", errOut)
			require.Contains(t, errOut, "killed the process tree")
			members, err := winsh.ReportedPIDs(pids)
			require.NoError(t, err)
			require.Len(t, members, treeMembers, "not every member started before the timeout, so the kill proves nothing")
			alive, err := winsh.Running(members)
			require.NoError(t, err)
			require.Empty(t, alive, "members of the tree outlived corral run's timeout")
			// TERM ends a job at once on Windows: no grace period to wait.
			require.Less(t, took, 15*time.Second)
		})
	}
}

// TestWindowsKilledCorralTakesItsTree kills corral.exe itself, as a CI
// runner or a closed IDE would, without any chance to clean up: the job's
// KILL_ON_JOB_CLOSE must end the tree when the process's handles close.
func TestWindowsKilledCorralTakesItsTree(t *testing.T) {
	bin := windowsBin(t, true)
	pids := tempDir(t)
	cmd := exec.Command(filepath.Join(bin, "corral.exe"), "run", "--no-daemon", "--dir", pids, "--", treeLine)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 10 * time.Second
	require.NoError(t, cmd.Start())
	members := waitMembers(t, pids, treeMembers)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.Eventually(t, func() bool {
		alive, err := winsh.Running(members)
		require.NoError(t, err)
		return len(alive) == 0
	}, 10*time.Second, 50*time.Millisecond, "the tree outlived the killed corral.exe; its output: %s", out.String())
}

// TestWindowsRunAsProcessExits124 checks the exit code a shell or a CI
// step sees from corral.exe after a timeout.
func TestWindowsRunAsProcessExits124(t *testing.T) {
	bin := windowsBin(t, true)
	pids := tempDir(t)
	cmd := exec.Command(filepath.Join(bin, "corral.exe"), "run", "--no-daemon", "--timeout", "4s", "--dir", pids, "--", treeLine)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "stderr: %s", stderr.String())
	require.Equal(t, exitTimeout, ee.ExitCode(), "stderr: %s", stderr.String())
	members, err := winsh.ReportedPIDs(pids)
	require.NoError(t, err)
	require.Len(t, members, treeMembers, "not every member started before the timeout, so the kill proves nothing")
	alive, err := winsh.Running(members)
	require.NoError(t, err)
	require.Empty(t, alive)
}

// waitMembers waits until n members have reported their PIDs in dir.
func waitMembers(t *testing.T, dir string, n int) []int {
	t.Helper()
	var pids []int
	require.Eventually(t, func() bool {
		var err error
		pids, err = winsh.ReportedPIDs(dir)
		require.NoError(t, err)
		return len(pids) >= n
	}, 30*time.Second, 20*time.Millisecond, "the tree's members did not all start")
	return pids
}
