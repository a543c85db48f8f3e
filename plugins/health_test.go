package plugins_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

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
	if !ok {
		t.Fatalf("%T does not implement env.HealthChecker", e)
	}
	check := func() (env.Health, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		began := time.Now()
		return hc.Health(ctx), time.Since(began)
	}
	h, _ := check()
	assert.Equal(t, env.ConditionOK, h.Condition, h.Detail)

	pid := e.(*plugins.Env).PluginPID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	h, took := check()
	assert.Equal(t, env.ConditionUnreachable, h.Condition)
	assert.Contains(t, h.Detail, "did not answer")
	assert.Less(t, took, 10*time.Second, "the check returns at its deadline")

	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	h, _ = check()
	assert.Equal(t, env.ConditionOK, h.Condition, h.Detail)
}
