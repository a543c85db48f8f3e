package nohup

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/shellquote"
)

// tcpRow returns a /proc/net/tcp row: local address and port, state and
// inode as given, the rest as the kernel writes it for a listener.
func tcpRow(sl int, local, state string, inode uint64) string {
	rem := "00000000:0000"
	if len(local) > 13 {
		rem = "00000000000000000000000000000000:0000"
	}
	return "   " + strconv.Itoa(sl) + ": " + local + " " + rem + " " + state +
		" 00000000:00000000 00:00000000 00000000     0        0 " + strconv.FormatUint(inode, 10) + " 1 0000000000000000 100 0 0 10 0\n"
}

// socketFile makes a unix socket file (stat -L on a /proc/PID/fd entry
// that links to it says "socket", as for a TCP socket) and returns its
// inode.
func socketFile(t *testing.T, path string) uint64 {
	l, err := net.Listen("unix", path)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestShellListeners runs corral_listeners and corral_listeners_all on a
// crafted /proc: the tree's sockets and nobody else's, rows not in the
// LISTEN state left out, descriptors that are files (even one named like a
// socket) not taken for sockets.
func TestShellListeners(t *testing.T) {
	const tag = "0123456789abcdef"
	mark := "CORRAL_TREE=" + tag
	p := newFakeProc(t)
	dir := t.TempDir()
	inoA := socketFile(t, filepath.Join(dir, "a"))
	inoB := socketFile(t, filepath.Join(dir, "b"))
	inoC := socketFile(t, filepath.Join(dir, "c"))
	plain := filepath.Join(dir, "socket:[1] 4242")
	require.NoError(t, os.WriteFile(plain, nil, 0o644))

	p.add(t, 100, statLine(100, "sh", "S", 1, 100, 1000, 0), mark)
	p.add(t, 101, statLine(101, "node", "S", 100, 100, 1001, 0), mark)
	p.add(t, 200, statLine(200, "other", "S", 1, 200, 2000, 0))
	fds := map[int]map[string]string{
		100: {"0": plain, "4": filepath.Join(dir, "c")},
		101: {"3": filepath.Join(dir, "a"), "7": plain},
		200: {"3": filepath.Join(dir, "b")},
	}
	cmdlines := map[int]string{100: "sh\x00-c\x00node server.js\nx\x00", 101: "", 200: "other\x00"}
	for pid, m := range fds {
		d := filepath.Join(string(p), strconv.Itoa(pid))
		require.NoError(t, os.MkdirAll(filepath.Join(d, "fd"), 0o755))
		for fd, target := range m {
			require.NoError(t, os.Symlink(target, filepath.Join(d, "fd", fd)))
		}
		require.NoError(t, os.WriteFile(filepath.Join(d, "cmdline"), []byte(cmdlines[pid]), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(d, "comm"), []byte("comm"+strconv.Itoa(pid)+"\n"), 0o644))
	}
	tcp := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		tcpRow(0, "0100007F:0BB8", "0A", inoA) + // 127.0.0.1:3000, node's
		tcpRow(1, "00000000:0BB9", "0A", inoB) + // 0.0.0.0:3001, another program's
		tcpRow(2, "0100007F:0BB8", "01", inoC) + // an established connection
		tcpRow(3, "0100007F:0BBD", "0A", 4242) // nobody's that we can read
	tcp6 := "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		tcpRow(0, "00000000000000000000000000000000:0BBA", "0A", inoC) + // [::]:3002, sh's
		tcpRow(1, "0000000000000000FFFF00000100007F:0BBB", "0A", 1) // ::ffff:127.0.0.1:3003
	for _, nd := range []string{filepath.Join(string(p), "100", "net"), filepath.Join(string(p), "net")} {
		require.NoError(t, os.MkdirAll(nd, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(nd, "tcp"), []byte(tcp), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(nd, "tcp6"), []byte(tcp6), 0o644))
	}

	forTestShells(t, func(t *testing.T, sh testShell) {
		rep, err := parseListenReport([]byte(sh.run(t, p.libWith("corral_listeners 100 1000 "+tag+"\n"))))
		require.NoError(t, err)
		assert.Equal(t, []env.Listener{
			{Port: 3000, Addr: "127.0.0.1", PID: 101, Command: "comm101"},
			{Port: 3002, Addr: "::", PID: 100, Command: "sh -c node server.js x"},
		}, rep.listeners(false))

		rep, err = parseListenReport([]byte(sh.run(t, p.libWith("corral_listeners_all\n"))))
		require.NoError(t, err)
		assert.Equal(t, []env.Listener{
			{Port: 3000, Addr: "127.0.0.1", PID: 101, Command: "comm101"},
			{Port: 3001, Addr: "0.0.0.0", PID: 200, Command: "other"},
			{Port: 3002, Addr: "::", PID: 100, Command: "sh -c node server.js x"},
			{Port: 3003, Addr: "::ffff:127.0.0.1"},
			{Port: 3005, Addr: "127.0.0.1"},
		}, rep.listeners(true))
	})
}

// TestShellWaitport runs corral_waitport on a crafted /proc: a port held by
// another program keeps it waiting until its budget runs out; the tree's
// port ends it at once.
func TestShellWaitport(t *testing.T) {
	const tag = "0123456789abcdef"
	p := newFakeProc(t)
	dir := t.TempDir()
	ino := socketFile(t, filepath.Join(dir, "a"))
	p.add(t, 100, statLine(100, "sh", "S", 1, 100, 1000, 0), "CORRAL_TREE="+tag)
	d := filepath.Join(string(p), "100")
	require.NoError(t, os.MkdirAll(filepath.Join(d, "fd"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(d, "net"), 0o755))
	require.NoError(t, os.Symlink(filepath.Join(dir, "a"), filepath.Join(d, "fd", "3")))
	require.NoError(t, os.WriteFile(filepath.Join(d, "cmdline"), []byte("srv\x00"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(d, "comm"), []byte("srv\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(d, "net", "tcp6"), nil, 0o644))
	state := t.TempDir()
	call := func(ports string) string {
		return "corral_waitport " + state + " 100 1000 " + tag + " '" + ports + "' 50 abc 0\n"
	}
	forTestShells(t, func(t *testing.T, sh testShell) {
		// 3001 (0BB9) is another inode's: not the tree's.
		require.NoError(t, os.WriteFile(filepath.Join(d, "net", "tcp"), []byte(tcpRow(0, "00000000:0BB9", "0A", ino+1)+tcpRow(1, "00000000:0BB8", "0A", ino)), 0o644))
		assert.Equal(t, "T\n", sh.run(t, p.libWith(call("0BB9"))))
		out := sh.run(t, p.libWith(call("1F90 0BB8")))
		first, rest, _ := strings.Cut(out, "\n")
		require.Equal(t, "F", first, out)
		// The quick look at the process group (w_fast) answered, with the
		// wanted row only; corral_listeners would send every LISTEN row.
		assert.Equal(t, 1, strings.Count(rest, "R "), rest)
		rep, err := parseListenReport([]byte(rest))
		require.NoError(t, err)
		assert.Equal(t, []env.Listener{{Port: 3000, Addr: "0.0.0.0", PID: 100, Command: "srv"}}, rep.listeners(false))
		_, err = os.Stat(filepath.Join(state, "follow-abc"))
		assert.ErrorIs(t, err, os.ErrNotExist, "the wait removes its follow file")
	})
}

// TestShellWaitportEscapee: a socket held by a process that left the
// command's process group (setsid) but carries its tree tag is the tree's:
// the wait's quick look at the group misses it, corral_listeners finds it.
func TestShellWaitportEscapee(t *testing.T) {
	const tag = "0123456789abcdef"
	p := newFakeProc(t)
	dir := t.TempDir()
	ino := socketFile(t, filepath.Join(dir, "a"))
	p.add(t, 100, statLine(100, "sh", "S", 1, 100, 1000, 0), "CORRAL_TREE="+tag)
	p.add(t, 101, statLine(101, "srv", "S", 100, 101, 1001, 0), "CORRAL_TREE="+tag)
	for _, pid := range []string{"100", "101"} {
		require.NoError(t, os.MkdirAll(filepath.Join(string(p), pid, "fd"), 0o755))
		require.NoError(t, os.MkdirAll(filepath.Join(string(p), pid, "net"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(string(p), pid, "net", "tcp6"), nil, 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(string(p), pid, "net", "tcp"), []byte(tcpRow(0, "0100007F:0BB8", "0A", ino)), 0o644))
	}
	require.NoError(t, os.Symlink(filepath.Join(dir, "a"), filepath.Join(string(p), "101", "fd", "3")))
	require.NoError(t, os.WriteFile(filepath.Join(string(p), "101", "cmdline"), []byte("srv\x00-p\x003000\x00"), 0o644))
	state := t.TempDir()
	forTestShells(t, func(t *testing.T, sh testShell) {
		out := sh.run(t, p.libWith("corral_waitport "+state+" 100 1000 "+tag+" '0BB8' 50 abc 0\n"))
		first, rest, _ := strings.Cut(out, "\n")
		require.Equal(t, "F", first, out)
		rep, err := parseListenReport([]byte(rest))
		require.NoError(t, err)
		assert.Equal(t, []env.Listener{{Port: 3000, Addr: "127.0.0.1", PID: 101, Command: "srv -p 3000"}}, rep.listeners(false))
	})
}

// TestShellTreeListeners runs corral_treelisteners on a crafted /proc with
// three trees in one call: one whose command runs (its group and a tagged
// escapee), one whose command exited (only a tagged process is left) and
// one with nothing left; another program's socket and a connection that is
// not listening are nobody's.
func TestShellTreeListeners(t *testing.T) {
	const tagA, tagB, tagC = "0123456789abcdef", "fedcba9876543210", "00000000000000aa"
	p := newFakeProc(t)
	dir := t.TempDir()
	ino := map[string]uint64{}
	for _, n := range []string{"a", "b", "c", "d"} {
		ino[n] = socketFile(t, filepath.Join(dir, n))
	}
	p.add(t, 100, statLine(100, "sh", "S", 1, 100, 1000, 0), "CORRAL_TREE="+tagA)
	p.add(t, 101, statLine(101, "node", "S", 100, 100, 1001, 0))                   // the group, untagged (env -i)
	p.add(t, 102, statLine(102, "esc", "S", 1, 102, 1002, 0), "CORRAL_TREE="+tagA) // setsid escapee
	p.add(t, 200, statLine(200, "other", "S", 1, 200, 2000, 0))
	p.add(t, 301, statLine(301, "daemon", "S", 1, 301, 3001, 0), "X=1", "CORRAL_TREE="+tagB)
	fds := map[int]map[string]string{
		100: {"0": filepath.Join(dir, "c")},
		101: {"3": filepath.Join(dir, "a")},
		102: {"5": filepath.Join(dir, "d")},
		200: {"3": filepath.Join(dir, "b")},
		301: {"4": filepath.Join(dir, "d"), "6": filepath.Join(dir, "c")},
	}
	for pid, m := range fds {
		d := filepath.Join(string(p), strconv.Itoa(pid))
		require.NoError(t, os.MkdirAll(filepath.Join(d, "fd"), 0o755))
		for fd, target := range m {
			require.NoError(t, os.Symlink(target, filepath.Join(d, "fd", fd)))
		}
	}
	tcp := tcpRow(0, "0100007F:0BB8", "0A", ino["a"]) + // 127.0.0.1:3000, node's (tree A)
		tcpRow(1, "00000000:0BB9", "0A", ino["b"]) + // 0.0.0.0:3001, another program's
		tcpRow(2, "0100007F:0BBA", "01", ino["c"]) + // established, not a listener
		tcpRow(3, "00000000:1F90", "0A", ino["d"]) // 0.0.0.0:8080, held in both A and B
	for _, pid := range []string{"100", "301"} {
		nd := filepath.Join(string(p), pid, "net")
		require.NoError(t, os.MkdirAll(nd, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(nd, "tcp"), []byte("  sl  local_address rem_address   st\n"+tcp), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(nd, "tcp6"), nil, 0o644))
	}
	// Tree B's command (300) is gone; tree C's start time is not its
	// PID's any more (a reused PID: 200 is another program).
	args := "100 1000 " + tagA + " 300 3000 " + tagB + " 200 9999 " + tagC + "\n"
	forTestShells(t, func(t *testing.T, sh testShell) {
		out := sh.run(t, p.libWith("corral_treelisteners "+args))
		trees, err := parseTreeReport([]byte(out), 3)
		require.NoError(t, err, out)
		assert.Equal(t, []env.Listener{
			{Port: 3000, Addr: "127.0.0.1", PID: 101},
			{Port: 8080, Addr: "0.0.0.0", PID: 102},
		}, trees[0], out)
		assert.Equal(t, []env.Listener{{Port: 8080, Addr: "0.0.0.0", PID: 301}}, trees[1], out)
		assert.Empty(t, trees[2], out)
	})
}

// TestParseTreeReport: lines the engine's script does not write are an
// error, not a guess.
func TestParseTreeReport(t *testing.T) {
	for _, bad := range []string{"M 3 100\n", "M 0 x\n", "N 0\n", "H 1\n", "R k garbage\n", "Z\n"} {
		_, err := parseTreeReport([]byte(bad), 1)
		assert.Error(t, err, bad)
	}
	trees, err := parseTreeReport(nil, 2)
	require.NoError(t, err)
	assert.Equal(t, [][]env.Listener{nil, nil}, trees)
}

// TestShellTreeListenersWhilePortsChurn runs corral_treelisteners under
// bash on the real /proc/net/tcp while another program opens and closes
// listeners: a tree's listener is in every look. (The rows were once read
// with the shell's read, which under bash re-reads /proc/net/tcp from the
// start at every line and skipped a row whenever the table changed before
// it: 6 of 40 looks missed the tree's port.)
func TestShellTreeListenersWhilePortsChurn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	f, err := ln.(*net.TCPListener).File()
	require.NoError(t, err)
	// The listener's only holder is a process of its own group, the tree.
	holder := exec.Command("sleep", "120")
	holder.ExtraFiles = []*os.File{f}
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, holder.Start())
	t.Cleanup(func() {
		_ = holder.Process.Kill()
		_ = holder.Wait()
	})
	require.NoError(t, f.Close())
	require.NoError(t, ln.Close())
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", holder.Process.Pid))
	require.NoError(t, err)
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	start := fields[19] // field 22 of stat, counted after the name

	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			var ls []net.Listener
			for range 20 {
				if l, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
					ls = append(ls, l)
				}
			}
			for _, l := range ls {
				l.Close()
			}
			// A pause, so that the churn leaves the shells a core.
			time.Sleep(time.Millisecond)
		}
	})
	defer func() {
		close(stop)
		churn.Wait()
	}()

	// A /proc of one process, the holder, linked to the real one: each
	// look then costs a few milliseconds whatever else runs on the
	// machine, while /proc/PID/net/tcp is the kernel's, changing as the
	// churn goes on.
	proc := t.TempDir()
	pid := strconv.Itoa(holder.Process.Pid)
	require.NoError(t, os.Symlink("/proc/"+pid, filepath.Join(proc, pid)))
	const looks = 40
	body := fmt.Sprintf("corral_proc=%s\ni=0\nwhile [ $i -lt %d ]; do corral_treelisteners %s %s 0123456789abcdef; echo '='; i=$((i + 1)); done\n",
		shellquote.Quote(proc), looks, pid, start)
	// bash alone: dash and busybox ash read a byte at a time, so only
	// bash's read (buffered, then a seek back) re-reads the table.
	sh, why := lookShell(t, "bash")
	if why != "" {
		t.Skipf("bash not available on this machine: %s", why)
	}
	out := sh.run(t, lib+body)
	reports := strings.Split(strings.TrimSuffix(out, "=\n"), "=\n")
	require.Len(t, reports, looks)
	missed := 0
	for _, rep := range reports {
		trees, err := parseTreeReport([]byte(rep), 1)
		require.NoError(t, err, rep)
		if !slices.Contains(trees[0], env.Listener{Port: port, Addr: "127.0.0.1", PID: holder.Process.Pid}) {
			missed++
		}
	}
	assert.Zero(t, missed, "looks (of %d) that missed the tree's listener on port %d", looks, port)
}
