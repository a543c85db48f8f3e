package procstat_test

import (
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/internal/procstat"
)

// statLine is a /proc/PID/stat line as the kernel writes it, for pid with
// command name comm, state S, parent 1, group 4242, terminal 34816
// (/dev/pts/0) with foreground group 4250, start time 987654, and CPU times (utime, stime, cutime, cstime) 7, 3, 20 and 5 ticks.
func statLine(pid int, comm string) string {
	return fmt.Sprintf("%d (%s) S 1 4242 4242 34816 4250 4194560 99 0 0 0 7 3 20 5 20 0 1 0 987654 1000 10 18446744073709551615\n", pid, comm)
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		comm string
	}{
		{"plain", "sleep"},
		{"empty", ""},
		{"space", "we ird"},
		{"parentheses", "(x)"},
		{"close paren space", "a) b"},
		{"doubled close", "we ird) name)"},
		{"newline", "a) b\nc"},
		{"forged fields", "x) Z 7 7 7 7"},
		{"only close parens", ")))"},
		{"open paren", "("},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := procstat.Parse([]byte(statLine(4242, tt.comm)))
			require.NoError(t, err)
			assert.Equal(t, procstat.Stat{
				PID: 4242, Comm: tt.comm, State: 'S', PPID: 1, PGID: 4242, TTY: 34816, TPGID: 4250, StartTime: 987654,
				UTime: 7, STime: 3, CUTime: 20, CSTime: 5,
			}, st)
			assert.Equal(t, uint64(35), st.CPU())
			assert.False(t, st.Exited())
		})
	}
}

func TestParseMalformed(t *testing.T) {
	tests := []struct {
		name, text string
	}{
		{"empty", ""},
		{"no parentheses", "12 x S 1 2"},
		{"no closing parenthesis", "12 (x S 1 2 3"},
		{"closing before opening", "12 )x( S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"},
		{"short", "12 (x) S 1"},
		{"pid not a number", statLine(0, "x")[1:]},
		{"state not one letter", "12 (x) SS 1 4242 4242 34816 4250 4194560 99 0 0 0 0 0 0 0 20 0 1 0 987654 1000"},
		{"ppid not a number", "12 (x) S p 4242 4242 0 -1 4194560 99 0 0 0 0 0 0 0 20 0 1 0 987654 1000"},
		{"pgid not a number", "12 (x) S 1 g 4242 0 -1 4194560 99 0 0 0 0 0 0 0 20 0 1 0 987654 1000"},
		{"start time not a number", "12 (x) S 1 4242 4242 34816 4250 4194560 99 0 0 0 0 0 0 0 20 0 1 0 -5 1000"},
		{"utime not a number", "12 (x) S 1 4242 4242 34816 4250 4194560 99 0 0 0 u 0 0 0 20 0 1 0 987654 1000"},
		{"negative cstime", "12 (x) S 1 4242 4242 34816 4250 4194560 99 0 0 0 0 0 0 -1 20 0 1 0 987654 1000"},
		{"name hides the fields", "12 (x S 1 4242 4242 34816 4250 4194560 99 0 0 0 0 0 0 0 20 0 1 0 987654 1000 )"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := procstat.Parse([]byte(tt.text))
			assert.ErrorIs(t, err, procstat.ErrMalformed)
		})
	}
}

func TestExited(t *testing.T) {
	tests := []struct {
		state  byte
		exited bool
	}{
		{'R', false}, {'S', false}, {'D', false}, {'T', false}, {'t', false}, {'I', false},
		{'Z', true}, {'X', true},
	}
	for _, tt := range tests {
		t.Run(string(tt.state), func(t *testing.T) {
			assert.Equal(t, tt.exited, procstat.Stat{State: tt.state}.Exited())
		})
	}
}

func TestReadSelf(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("no /proc")
	}
	st, err := procstat.Read(os.Getpid())
	require.NoError(t, err)
	assert.Equal(t, os.Getpid(), st.PID)
	assert.Equal(t, os.Getppid(), st.PPID)
	assert.NotZero(t, st.StartTime)
	assert.False(t, st.Exited())
}

func TestReadNoProcess(t *testing.T) {
	// PIDs are positive: -1 never exists, here or on a system without /proc.
	_, err := procstat.Read(-1)
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, err = procstat.Identify(-1)
	assert.ErrorIs(t, err, fs.ErrNotExist)
	assert.False(t, procstat.Identity{PID: -1}.Alive())
}
