package cli

import (
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
)

// TestLimitFlags: --memory, --cpus and --pids reach StartOptions.Limits
// as bytes, cores and tasks; none given is nil, not a zero Limits.
func TestLimitFlags(t *testing.T) {
	parse := func(args ...string) (*env.Limits, error) {
		var lf limitFlags
		cmd := &cobra.Command{Use: "x"}
		lf.addFlags(cmd)
		require.NoError(t, cmd.Flags().Parse(args))
		return lf.parse("run", cmd)
	}
	for _, tc := range []struct {
		args []string
		want *env.Limits
	}{
		{nil, nil},
		{[]string{"--memory", "100M"}, &env.Limits{Memory: 100 << 20}},
		{[]string{"--memory=2g", "--cpus", "1.5", "--pids", "512"}, &env.Limits{Memory: 2 << 30, CPUs: 1.5, Pids: 512}},
		{[]string{"--cpus", "0.5"}, &env.Limits{CPUs: 0.5}},
		{[]string{"--pids", " 64 "}, &env.Limits{Pids: 64}},
		{[]string{"--memory", "1073741824"}, &env.Limits{Memory: 1 << 30}},
	} {
		got, err := parse(tc.args...)
		require.NoError(t, err, "%q", tc.args)
		assert.Equal(t, tc.want, got, "%q", tc.args)
	}
	for _, bad := range [][]string{
		{"--memory", "2X"}, {"--memory", "-1"}, {"--memory", "0"}, {"--memory", "5M"},
		{"--cpus", "NaN"}, {"--cpus", "-1"}, {"--cpus", "0.001"}, {"--cpus", "Inf"},
		{"--pids", "0"}, {"--pids", "-5"}, {"--pids", "many"}, {"--pids", "9"},
	} {
		_, err := parse(bad...)
		var ee *exitError
		if assert.ErrorAs(t, err, &ee, "%q", bad) {
			assert.Equal(t, exitUsage, ee.code, "%q", bad)
			assert.Contains(t, ee.msg, "run: "+bad[0], "%q: the error names the flag", bad)
		}
	}
	// A huge value is not echoed whole.
	_, err := parse("--memory", strings.Repeat("x", 5000))
	require.Error(t, err)
	assert.Less(t, len(err.Error()), 200)
}

// TestRunStartOptionsCarryLimits: corral run passes its limits on.
func TestRunStartOptionsCarryLimits(t *testing.T) {
	lim := &env.Limits{Memory: 100 << 20, Pids: 20}
	for _, backend := range []string{"local", "ssh://h"} {
		opts, err := runOptions{backend: backend, limits: lim}.startOptions("true")
		require.NoError(t, err)
		assert.Equal(t, lim, opts.Limits, backend)
	}
}

// TestHelpSaysLimitsAreHard: run's and start's help say what going over a
// limit does.
func TestHelpSaysLimitsAreHard(t *testing.T) {
	for _, c := range []string{"run", "start"} {
		code, out, _ := corral(t, "", c, "--help")
		require.Equal(t, 0, code)
		assert.Contains(t, out, "--memory")
		assert.Contains(t, out, "OOM kill of the tree")
		assert.Contains(t, out, "--cpus")
		assert.Contains(t, out, "--pids")
	}
}

// TestDaemonErrorSaysTheOperationOnce: the registry's "start: " under
// start's own is said once.
func TestDaemonErrorSaysTheOperationOnce(t *testing.T) {
	err := daemonError("start", &daemon.APIError{Status: 400, Code: daemon.CodeUnsupported,
		Message: "registry: start: docker://web cannot enforce --memory: no cgroup"})
	assert.Equal(t, "start: docker://web cannot enforce --memory: no cgroup", err.Error())
	var ee *exitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, exitCorralError, ee.code)
}

// TestRunLimitsReachTheBackend: corral run --memory goes to the local
// backend, which runs the command under it or, while it enforces no
// memory limit, refuses it in one line naming the flag, exit 125, having
// run nothing.
func TestRunLimitsReachTheBackend(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the local backend's limits are Linux cgroups")
	}
	e, err := local.New(local.Options{StateDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	enforced := slices.Contains(e.Capabilities().Limits, env.LimitMemory)
	require.NoError(t, e.Close())
	marker := filepath.Join(t.TempDir(), "ran")
	code, _, errOut := corral(t, "", "run", "--memory", "100M", "--", "touch "+marker)
	_, statErr := os.Stat(marker)
	if enforced {
		assert.Equal(t, 0, code, errOut)
		assert.NoError(t, statErr, "the command ran")
		return
	}
	assert.Equal(t, exitCorralError, code)
	assert.Regexp(t, `^corral: run: start: local cannot enforce --memory: .+\n$`, errOut)
	assert.True(t, os.IsNotExist(statErr), "nothing ran")
}
