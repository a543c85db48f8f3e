package nohup

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/internal/shellquote"
)

// The library's functions, run under each shell against crafted input: a
// directory laid out like /proc, which pstat and tree read in place of
// /proc when corral_proc names it.

// fakeProc is a crafted /proc: PID directories with stat and environ.
type fakeProc string

func newFakeProc(t *testing.T) fakeProc { return fakeProc(t.TempDir()) }

// statLine returns a /proc/PID/stat line with the fields the engine reads
// (state, ppid, pgrp, start time, wait status) and zeros elsewhere.
func statLine(pid int, comm, state string, ppid, pgrp int, start int64, wstatus int) string {
	f := make([]string, 52)
	for i := range f {
		f[i] = "0"
	}
	f[0], f[1], f[2] = strconv.Itoa(pid), "("+comm+")", state
	f[3], f[4] = strconv.Itoa(ppid), strconv.Itoa(pgrp)
	f[21], f[51] = strconv.FormatInt(start, 10), strconv.Itoa(wstatus)
	return strings.Join(f, " ") + "\n"
}

// add writes PID's stat line and its environment (NUL-terminated entries).
func (p fakeProc) add(t *testing.T, pid int, stat string, environ ...string) {
	t.Helper()
	dir := filepath.Join(string(p), strconv.Itoa(pid))
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644))
	var env strings.Builder
	for _, kv := range environ {
		env.WriteString(kv)
		env.WriteByte(0)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "environ"), []byte(env.String()), 0o644))
}

// awkModes are the two ways the library reads /proc in pgscan and
// corral_treestats: with awk, and with the builtins a sandbox without awk
// is left with.
var awkModes = []string{"", "corral_noawk=1\n"}

// libWith returns lib, then corral_proc set to p, then body.
func (p fakeProc) libWith(body string) string {
	return lib + "corral_proc=" + shellquote.Quote(string(p)) + "\n" + body
}

func TestShellPstat(t *testing.T) {
	// The name is field 2, in parentheses; it may hold anything, and the
	// fields come after its last ") ".
	names := []string{
		"sh", "a b", "  lead", "a) b", ") ", "))", "((", "x) Z 7 7 7", "nl\nx", "a) S 1\n) R 2 3", "\n", "a\n\n) b",
	}
	p := newFakeProc(t)
	var calls strings.Builder
	var want strings.Builder
	for i, name := range names {
		pid := 100 + i
		p.add(t, pid, statLine(pid, name, "S", 1, 4000+i, 5000000+int64(i), 256*i))
		calls.WriteString("if pstat " + strconv.Itoa(pid) + `; then echo "$p_state $p_pgrp $p_start $p_wstatus"; else echo none; fi` + "\n")
		want.WriteString("S " + strconv.Itoa(4000+i) + " " + strconv.Itoa(5000000+i) + " " + strconv.Itoa(256*i) + "\n")
	}
	// No such process, and a stat file that is empty.
	p.add(t, 99, "")
	calls.WriteString("pstat 98 || echo none\npstat 99 || echo none\n")
	want.WriteString("none\nnone\n")

	forTestShells(t, func(t *testing.T, sh testShell) {
		assert.Equal(t, want.String(), sh.run(t, p.libWith(calls.String())))
	})
}

// TestShellPstatProc checks pstat on the real /proc when corral_proc is
// unset: the shell's own stat line, which Go parses too.
func TestShellPstatProc(t *testing.T) {
	forTestShells(t, func(t *testing.T, sh testShell) {
		out := sh.run(t, lib+`unset corral_proc
pstat $$ || exit 1
echo "$p_state $p_pgrp $p_start"
cat /proc/$$/stat
`)
		got, stat, ok := strings.Cut(out, "\n")
		require.True(t, ok, "output %q", out)
		f := strings.Fields(stat[strings.LastIndex(stat, ") ")+2:])
		require.Greater(t, len(f), 19, "stat line %q", stat)
		// The state differs (the shell waits for cat when cat reads the
		// line); the process group and the start time must not.
		assert.Equal(t, f[2]+" "+f[19], strings.SplitN(got, " ", 2)[1], "pgrp and start time of %q", stat)
		assert.Contains(t, []string{"R", "S"}, strings.Fields(got)[0])
	})
}

func TestShellWstatus(t *testing.T) {
	cases := []struct {
		status int
		want   string
	}{
		{0, "code 0"},
		{1 << 8, "code 1"},
		{2 << 8, "code 2"},
		{125 << 8, "code 125"},
		{255 << 8, "code 255"},
		{9, "signal 9"},
		{15, "signal 15"},
		{2, "signal 2"},
		{0x80 | 11, "signal 11"}, // SIGSEGV with a core dump
		{0x80 | 6, "signal 6"},
		{64, "signal 64"},
	}
	var calls, want strings.Builder
	for _, c := range cases {
		calls.WriteString("wstatus " + strconv.Itoa(c.status) + "; echo \"$st\"\n")
		want.WriteString(c.want + "\n")
	}
	forTestShells(t, func(t *testing.T, sh testShell) {
		assert.Equal(t, want.String(), sh.run(t, lib+calls.String()))
	})
}

func TestShellTree(t *testing.T) {
	const tag = "0123456789abcdef"
	mark := "CORRAL_TREE=" + tag
	// The command 100, started at tick 1000, and its process group, plus
	// escapees that kept the tag and processes that only look related.
	build := func(t *testing.T, cmdState string, cmdEnv []string) fakeProc {
		p := newFakeProc(t)
		p.add(t, 100, statLine(100, "sh", cmdState, 50, 100, 1000, 0), cmdEnv...)
		p.add(t, 101, statLine(101, "child", "S", 100, 100, 1001, 0), mark)
		p.add(t, 102, statLine(102, "grand) R 1 1\nchild", "R", 101, 100, 1002, 0)) // environment cleared
		p.add(t, 103, statLine(103, "setsid", "S", 1, 103, 1003, 0), "A=1", mark)   // setsid escapee
		p.add(t, 104, statLine(104, "double fork", "S", 1, 104, 1004, 0), mark)     // double-fork escapee
		p.add(t, 105, statLine(105, "zombie", "Z", 100, 100, 1005, 0), mark)        // dead, in the group
		p.add(t, 106, statLine(106, "zombie", "Z", 1, 106, 1006, 0), mark)          // dead escapee
		p.add(t, 200, statLine(200, "unrelated", "S", 1, 200, 2000, 0), "CORRAL_TREE="+tag+"0", "X="+mark)
		p.add(t, 201, statLine(201, "other group", "S", 1, 10, 2001, 0), "CORRAL_TREE=fedcba9876543210")
		p.add(t, 202, statLine(202, "100) S 1 100", "S", 1, 202, 2002, 0))
		return p
	}
	cases := []struct {
		name     string
		cmdState string
		cmdEnv   []string
		start    string
		want     []string
	}{
		{"running", "S", []string{mark}, "1000", []string{"100", "101", "102", "103", "104"}},
		// The command ended and its PID was reused: the group is not ours,
		// the tag still finds the tree.
		{"reused", "S", []string{"A=1"}, "999", []string{"101", "103", "104"}},
		// The command is a zombie: its PID no longer names the group for
		// sure, and it is not live.
		{"ended", "Z", []string{mark}, "1000", []string{"101", "103", "104"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := build(t, c.cmdState, c.cmdEnv)
			forTestShells(t, func(t *testing.T, sh testShell) {
				for _, mode := range awkModes {
					// tree's status is its last check's: not an error.
					got := strings.Fields(sh.run(t, p.libWith(mode+"tree 100 "+c.start+" "+tag+"\nexit 0\n")))
					slices.Sort(got)
					assert.Equal(t, c.want, got, "%q", mode)
				}
			})
		})
	}
}

// TestShellReadlog reads byte ranges that start and end on either side of
// dd's 64 KiB blocks, with dd counting in bytes (r_dd unset: probed) and
// without (r_dd=0: the dd | tail | head fallback for a dd without
// iflag=count_bytes).
func TestShellReadlog(t *testing.T) {
	data := make([]byte, 300_000)
	for i := range data {
		data[i] = byte(i*7 + i/251)
	}
	log := filepath.Join(t.TempDir(), "log")
	require.NoError(t, os.WriteFile(log, data, 0o644))
	ranges := [][2]int{{0, 1}, {0, 65536}, {1, 65536}, {65535, 2}, {65536, 65536}, {100_000, 150_000}, {299_999, 1}, {250_000, 50_000}, {7, 299_993}}
	forTestShells(t, func(t *testing.T, sh testShell) {
		for _, mode := range []string{"", "r_dd=0\n"} {
			for _, r := range ranges {
				body := mode + "readlog " + shellquote.Quote(log) + " " + strconv.Itoa(r[0]) + " " + strconv.Itoa(r[1]) + "\n"
				got := sh.run(t, lib+body)
				if got != string(data[r[0]:r[0]+r[1]]) {
					assert.Fail(t, fmt.Sprintf("%qreadlog %d %d: got %d bytes, want %d (or different bytes)", mode, r[0], r[1], len(got), r[1]))
				}
			}
		}
	})
}

// TestShellFollowPace: a follow looks less often the longer the process has
// been quiet, so that idle servers cost few forks.
func TestShellFollowPace(t *testing.T) {
	forTestShells(t, func(t *testing.T, sh testShell) {
		got := sh.run(t, lib+"for idle in 0 999 1000 4999 5000 29999 30000 3600000; do f_capfor; echo $f_cap; done\n")
		assert.Equal(t, "20\n20\n50\n50\n200\n200\n500\n500\n", got)
	})
}
