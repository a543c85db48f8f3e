package nohup

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

// statLineCPU is statLine with CPU times (fields 14 to 17: utime, stime,
// cutime, cstime) set.
func statLineCPU(pid int, comm, state string, ppid, pgrp int, start int64, cpu [4]int) string {
	line := statLine(pid, comm, state, ppid, pgrp, start, 0)
	cut := strings.LastIndex(line, ") ") + 2
	f := strings.Fields(line[cut:]) // field N is f[N-3]
	for i, v := range cpu {
		f[11+i] = strconv.Itoa(v)
	}
	return line[:cut] + strings.Join(f, " ") + "\n"
}

// addStats writes PID's status (VmRSS in kB) and, when io is not empty,
// its io file.
func (p fakeProc) addStats(t *testing.T, pid int, rssKB int, io string) {
	t.Helper()
	dir := filepath.Join(string(p), strconv.Itoa(pid))
	status := "Name:\tx\nVmPeak:\t   99999 kB\nVmRSS:\t" + strconv.Itoa(rssKB) + " kB\nThreads:\t1\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "status"), []byte(status), 0o644))
	if io != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "io"), []byte(io), 0o644))
	}
}

func ioFile(read, write int) string {
	return "rchar: 5\nwchar: 6\nsyscr: 1\nsyscw: 1\nread_bytes: " + strconv.Itoa(read) +
		"\nwrite_bytes: " + strconv.Itoa(write) + "\ncancelled_write_bytes: 0\n"
}

// TestShellTreeStats runs corral_treestats on a crafted /proc with three
// trees in one call: one whose command runs (its group, a tagged escapee
// whose io is unreadable, and a zombie that does not count), one whose
// command exited (a tagged process is left) and one with nothing left; a
// process of nobody's tree is not counted, and a process listed twice (in
// the group and tagged) is counted once.
func TestShellTreeStats(t *testing.T) {
	const tagA, tagB, tagC = "0123456789abcdef", "fedcba9876543210", "00000000000000aa"
	p := newFakeProc(t)
	p.add(t, 100, statLineCPU(100, "sh", "S", 1, 100, 1000, [4]int{1, 2, 300, 400}), "CORRAL_TREE="+tagA)
	p.addStats(t, 100, 1000, ioFile(10, 20))
	p.add(t, 101, statLineCPU(101, "a) R 1 2", "R", 100, 100, 1001, [4]int{50, 5, 0, 0})) // the group, untagged
	p.addStats(t, 101, 2000, ioFile(1, 2))
	p.add(t, 102, statLineCPU(102, "esc", "S", 1, 102, 1002, [4]int{7, 3, 0, 0}), "CORRAL_TREE="+tagA) // setsid escapee
	p.addStats(t, 102, 4000, "")                                                                       // another user's: no io
	p.add(t, 103, statLineCPU(103, "zomb", "Z", 100, 100, 1003, [4]int{9999, 0, 0, 0}))
	p.add(t, 200, statLineCPU(200, "other", "S", 1, 200, 2000, [4]int{8888, 0, 0, 0}))
	p.addStats(t, 200, 8000, ioFile(5, 5))
	p.add(t, 301, statLineCPU(301, "daemon", "S", 1, 301, 3001, [4]int{40, 60, 0, 0}), "X=1", "CORRAL_TREE="+tagB)
	p.addStats(t, 301, 300, ioFile(4096, 8192))
	// Sums past 32 bits, in decimal: what a build tree reads and writes.
	p.add(t, 302, statLineCPU(302, "big", "S", 1, 302, 3002, [4]int{0, 0, 0, 0}), "CORRAL_TREE="+tagB)
	p.addStats(t, 302, 0, ioFile(5_000_000_000, 9_000_000_000_000))
	// Tree B's command (300) is gone; tree C's start time is not its
	// PID's any more (a reused PID: 200 is another program).
	args := "100 1000 " + tagA + " 300 3000 " + tagB + " 200 9999 " + tagC + "\n"
	forTestShells(t, func(t *testing.T, sh testShell) {
		for _, mode := range awkModes {
			out := sh.run(t, p.libWith(mode+"corral_treestats "+args))
			trees, err := parseStatsReport([]byte(out), 3)
			require.NoError(t, err, "%q: %s", mode, out)
			assert.Equal(t, []*env.TreeStats{
				{CPU: (703 + 55 + 10) * 10 * time.Millisecond, RSS: 7000 * 1024, Pids: 3, ReadBytes: 11, WriteBytes: 22, Missing: []string{"io"}},
				{CPU: 100 * 10 * time.Millisecond, RSS: 300 * 1024, Pids: 2, ReadBytes: 4096 + 5_000_000_000, WriteBytes: 8192 + 9_000_000_000_000},
				nil,
			}, trees, "%q: %s", mode, out)
		}
	})
}

// TestParseStatsReport: lines the engine's script does not write are an
// error naming the line, not a guess and never a panic; a tree without
// its line is an error too.
func TestParseStatsReport(t *testing.T) {
	for _, bad := range []string{
		"",
		"0 1 2 3 4 5 1\n0 1 2 3 4 5 1\n",
		"0 1 2 3 4 5\n",
		"0 1 2 3 4 5 1 9\n",
		"3 1 2 3 4 5 1\n",
		"-1 1 2 3 4 5 1\n",
		"x 1 2 3 4 5 1\n",
		"0 1 -2 3 4 5 1\n",
		"0 1 2 3 4 5 2\n",
		"0 99999999999999999999 2 3 4 5 1\n",
		"0 1 2 3 4 5 1\ngarbage\n",
	} {
		_, err := parseStatsReport([]byte(bad), 1)
		assert.Error(t, err, bad)
	}
	_, err := parseStatsReport([]byte("0 1 2 3 4 5 1\nline that is wrong\n"), 1)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "line that is wrong")

	trees, err := parseStatsReport([]byte("1 250 2048 2 0 7 0\n0 0 0 0 0 0 1\n"), 2)
	require.NoError(t, err)
	assert.Equal(t, []*env.TreeStats{
		nil,
		{CPU: 2500 * time.Millisecond, RSS: 2048 * 1024, Pids: 2, WriteBytes: 7, Missing: []string{"io"}},
	}, trees)
}
