package local

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// wineSmokeEnvVar makes the test binary a child that prints a line and
// exits 7, for TestWineSmokeChildExitCode.
const wineSmokeEnvVar = "CORRAL_LOCAL_TEST_WINE_SMOKE"

func init() {
	helperRoles[wineSmokeEnvVar] = func() int {
		fmt.Println("smoke child " + os.Getenv(wineSmokeEnvVar))
		return 7
	}
}

// TestWineSmokeChildExitCode proves the harness that runs the Windows
// tests (scripts/wine/run-windows-tests.sh, under Wine in CI): a Go 1.26
// test binary starts at all (it needs the stand-in bcryptprimitives.dll
// under Wine 8.0), and it can start a child process and read the child's
// output and exit code, which every Windows test of this package needs.
func TestWineSmokeChildExitCode(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), wineSmokeEnvVar+"=ok")
	out, err := cmd.Output()
	var exitErr *exec.ExitError
	require.True(t, errors.As(err, &exitErr), "the child should exit with a status: %v", err)
	require.Equal(t, 7, exitErr.ExitCode())
	require.Equal(t, "smoke child ok\n", string(out))
}
