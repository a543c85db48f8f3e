package procstat_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/internal/procstat"
)

// startNamed runs a copy of sleep(1) named name and returns it, killed and
// reaped when the test ends. The kernel takes the command name from the
// executable's file name, so the name reaches /proc/PID/stat unchanged.
func startNamed(t *testing.T, name string, seconds string) *exec.Cmd {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	require.NoError(t, err)
	data, err := os.ReadFile(sleep)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, data, 0o755))
	cmd := exec.Command(path, seconds)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// TestRealProcessNames starts processes whose names would fool a parser
// that splits on spaces or on the first ')'.
func TestRealProcessNames(t *testing.T) {
	names := []string{"plain", "a) b\nc", "x) Z 1 2 3", "((", "sp ace", "paren)", "nl\n"}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			cmd := startNamed(t, name, "60")
			st, err := procstat.Read(cmd.Process.Pid)
			require.NoError(t, err)
			assert.Equal(t, name, st.Comm)
			assert.Equal(t, cmd.Process.Pid, st.PID)
			assert.Equal(t, os.Getpid(), st.PPID)
			assert.False(t, st.Exited(), "state %c", st.State)

			id, err := procstat.Identify(cmd.Process.Pid)
			require.NoError(t, err)
			assert.Equal(t, procstat.Identity{PID: cmd.Process.Pid, StartTime: st.StartTime}, id)
			assert.True(t, id.Alive())
			assert.False(t, procstat.Identity{PID: id.PID, StartTime: id.StartTime + 1}.Alive(),
				"another start time is another process")
		})
	}
}

// TestZombie: a process that has exited but is not reaped yet keeps its
// PID and start time, yet is no longer alive and cannot be identified.
func TestZombie(t *testing.T) {
	cmd := startNamed(t, "a) b\nc", "0")
	pid := cmd.Process.Pid
	id := procstat.Identity{PID: pid}
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := procstat.Read(pid)
		require.NoError(t, err, "an unreaped child keeps its /proc entry")
		id.StartTime = st.StartTime
		if st.State == 'Z' {
			assert.True(t, st.Exited())
			break
		}
		require.True(t, time.Now().Before(deadline), "process %d not a zombie after 30s (state %c)", pid, st.State)
		time.Sleep(10 * time.Millisecond)
	}
	assert.False(t, id.Alive())
	_, err := procstat.Identify(pid)
	assert.Error(t, err)

	require.NoError(t, cmd.Wait())
	assert.False(t, id.Alive(), "a reaped process is gone")
}

// TestReadCPU: a process that computes sees its own CPU time rise from
// field 14 on: with the times not parsed it would stay zero.
func TestReadCPU(t *testing.T) {
	deadline := time.Now().Add(10 * time.Second)
	x := 0
	for time.Now().Before(deadline) {
		for i := 0; i < 1_000_000; i++ {
			x += i
		}
		st, err := procstat.Read(os.Getpid())
		require.NoError(t, err)
		if st.CPU() > 0 {
			return
		}
	}
	t.Fatalf("CPU time still zero after 10 s of computing (%d)", x)
}
