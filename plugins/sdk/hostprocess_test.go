package sdk_test

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/plugins/sdk"
)

func TestHostProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("HostProcess reads /proc")
	}
	self, err := sdk.FindHostProcess(os.Getpid())
	require.NoError(t, err)

	ended := exec.Command("true")
	require.NoError(t, ended.Run())
	endedRecord := sdk.HostProcess{PID: ended.Process.Pid, StartTime: self.StartTime}

	tests := []struct {
		name    string
		process sdk.HostProcess
		running bool
	}{
		{"this process", self, true},
		{"same PID, another start time", sdk.HostProcess{PID: self.PID, StartTime: self.StartTime + 1}, false},
		{"a process that ended", endedRecord, false},
		{"no such PID", sdk.HostProcess{PID: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.running, tt.process.Running())
		})
	}
}

func TestFindHostProcessRefuses(t *testing.T) {
	_, err := sdk.FindHostProcess(-1)
	assert.Error(t, err, "no such PID")

	if runtime.GOOS != "linux" {
		return
	}
	zombie := exec.Command("true")
	require.NoError(t, zombie.Start())
	t.Cleanup(func() { _ = zombie.Wait() })
	// Until Wait reaps it, the ended child stays a zombie.
	assert.Eventually(t, func() bool {
		_, err := sdk.FindHostProcess(zombie.Process.Pid)
		return err != nil
	}, time.Minute, 10*time.Millisecond, "a zombie is refused")
}
