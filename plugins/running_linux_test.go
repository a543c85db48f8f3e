package plugins_test

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/plugins"
)

// TestProcessRunning: the /proc check that backs up the pidfd check of a
// plugin process sees a zombie or a reaped process as ended.
func TestProcessRunning(t *testing.T) {
	zombie := exec.Command("true")
	require.NoError(t, zombie.Start())
	t.Cleanup(func() { _ = zombie.Wait() })
	require.Eventually(t, func() bool { return !plugins.ProcessRunning(zombie.Process.Pid) },
		time.Minute, 10*time.Millisecond, "an ended, unreaped child is not running")

	reaped := exec.Command("true")
	require.NoError(t, reaped.Run())

	tests := []struct {
		name    string
		pid     int
		running bool
	}{
		{"this process", os.Getpid(), true},
		{"no PID known: left to go-plugin", 0, true},
		{"zombie", zombie.Process.Pid, false},
		{"reaped", reaped.Process.Pid, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.running, plugins.ProcessRunning(tt.pid))
		})
	}
}
