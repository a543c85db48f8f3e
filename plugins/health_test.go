package plugins_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/plugins"
)

// TestHealth: a plugin's health check answers ok while the plugin
// answers; a plugin process that is stopped (it holds its connection but
// answers nothing, as a hung plugin does) is unreachable within the
// check's deadline, and ok again once it runs.
func TestHealth(t *testing.T) {
	e := openPlugin(t, "localplugin://?state="+t.TempDir())
	t.Cleanup(func() { e.Close() })
	hc, ok := e.(env.HealthChecker)
	require.Truef(t, ok, "%T does not implement env.HealthChecker", e)
	check := func() (env.Health, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		began := time.Now()
		return hc.Health(ctx), time.Since(began)
	}
	h, _ := check()
	assert.Equal(t, env.ConditionOK, h.Condition, h.Detail)

	pid := e.(*plugins.Env).PluginPID()
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	// kill(2) returns before the stop takes hold: a check sent at once
	// could still be answered.
	require.Eventually(t, func() bool { return stopped(pid) }, 5*time.Second, time.Millisecond, "plugin %d never stopped", pid)
	h, took := check()
	assert.Equal(t, env.ConditionUnreachable, h.Condition)
	assert.Contains(t, h.Detail, "did not answer")
	assert.Less(t, took, 10*time.Second, "the check returns at its deadline")

	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	h, _ = check()
	assert.Equal(t, env.ConditionOK, h.Condition, h.Detail)
}

// stopped reports whether /proc says pid is stopped by a signal.
func stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name's closing parenthesis.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'T'
}
