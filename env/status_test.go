package env_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/corralhq/corral/env"
)

func TestExitStatus(t *testing.T) {
	tests := []struct {
		name    string
		status  env.ExitStatus
		shell   int
		success bool
		str     string
	}{
		{"success", env.Exited(0), 0, true, "exit status 0"},
		{"failure", env.Exited(1), 1, false, "exit status 1"},
		{"code 3", env.Exited(3), 3, false, "exit status 3"},
		{"code 255", env.Exited(255), 255, false, "exit status 255"},
		// A command's own exit 143 stays a code: only Signal says "killed".
		{"code 143", env.Exited(143), 143, false, "exit status 143"},
		{"SIGHUP", env.Signaled(env.SIGHUP), 129, false, "killed by SIGHUP"},
		{"SIGINT", env.Signaled(env.SIGINT), 130, false, "killed by SIGINT"},
		{"SIGKILL", env.Signaled(env.SIGKILL), 137, false, "killed by SIGKILL"},
		{"SIGPIPE", env.Signaled(env.SIGPIPE), 141, false, "killed by SIGPIPE"},
		{"SIGTERM", env.Signaled(env.SIGTERM), 143, false, "killed by SIGTERM"},
		{"SIGSYS", env.Signaled("SYS"), 159, false, "killed by SIGSYS"},
		// What a Wait returns with its error: never "exit status 0".
		{"no status", env.NoStatus, -1, false, "no exit status"},
		// A signal without a known number still reads as a signal death.
		{"unknown signal", env.Signaled("RTMIN"), 128, false, "killed by SIGRTMIN"},
		// Signal wins over Code, whatever Code holds.
		{"signal with code 0", env.ExitStatus{Code: 0, Signal: env.SIGTERM}, 143, false, "killed by SIGTERM"},
		{"zero value", env.ExitStatus{}, 0, true, "exit status 0"},
		// The OOM killer's SIGKILL, and a shell's 137 for its child's.
		{"out of memory", env.ExitStatus{Code: -1, Signal: env.SIGKILL, OOMKilled: true}, 137, false, "killed by SIGKILL, out of memory"},
		{"out of memory, code", env.ExitStatus{Code: 137, OOMKilled: true}, 137, false, "exit status 137, out of memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.shell, tt.status.ShellCode())
			assert.Equal(t, tt.success, tt.status.Success())
			assert.Equal(t, tt.str, tt.status.String())
		})
	}
}

func TestSignaledCode(t *testing.T) {
	// ExitStatus promises Code is -1 when Signal is set.
	assert.Equal(t, env.ExitStatus{Code: -1, Signal: env.SIGKILL}, env.Signaled(env.SIGKILL))
	assert.Equal(t, env.ExitStatus{Code: 7}, env.Exited(7))
}
