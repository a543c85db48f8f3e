package procnet

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"syscall"
)

// Listening returns the LISTEN sockets of the network namespace process
// pid is in (pid 0: the caller's own), IPv4 then IPv6. A kernel without
// IPv6 has no tcp6 table; that is no error.
//
// For the caller's own namespace (pid 0, or a pid sharing it) it asks the
// kernel over sock_diag netlink, which is much cheaper (see diagListening);
// for another namespace, or where sock_diag is unavailable (a kernel
// without it, a seccomp filter), it reads /proc/PID/net/tcp and tcp6.
func Listening(pid int) ([]Socket, error) {
	if pid == 0 || sameNetNS(pid) {
		if socks, err := diagListening(); err == nil {
			return socks, nil
		}
	}
	return procListening(pid)
}

// sameNetNS reports whether pid is in the caller's network namespace.
func sameNetNS(pid int) bool {
	own, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return false
	}
	ns, err := NetNS(pid)
	return err == nil && ns == own
}

// procListening is Listening from the text tables.
func procListening(pid int) ([]Socket, error) {
	dir := "/proc/self/net/"
	if pid != 0 {
		dir = "/proc/" + strconv.Itoa(pid) + "/net/"
	}
	v4, err := readTable(dir + "tcp")
	if err != nil {
		return nil, err
	}
	v6, err := readTable(dir + "tcp6")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return append(v4, v6...), nil
}

func readTable(path string) ([]Socket, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	socks, err := ParseListening(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return socks, nil
}

// NetNS names the network namespace process pid is in ("net:[4026531840]").
func NetNS(pid int) (string, error) {
	return os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/net")
}

// SocketInodes returns, for each inode of wanted that one of pids holds,
// its holder: the lowest such PID. Processes that are gone or whose fds
// are unreadable are skipped. It stops reading as soon as every wanted
// inode has a holder.
func SocketInodes(pids []int, wanted map[uint64]bool) map[uint64]int {
	holders := make(map[uint64]int)
	if len(wanted) == 0 {
		return holders
	}
	sorted := slices.Clone(pids)
	slices.Sort(sorted)
	for _, pid := range slices.Compact(sorted) {
		if scanFDs(pid, wanted, holders) {
			break
		}
	}
	return holders
}

// AllSocketInodes is SocketInodes over every process in /proc.
func AllSocketInodes(wanted map[uint64]bool) (map[uint64]int, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("read /proc: %w", err)
	}
	pids := make([]int, 0, len(names))
	for _, name := range names {
		if pid, err := strconv.Atoi(name); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return SocketInodes(pids, wanted), nil
}

// scanFDs records pid as the holder of each wanted inode it holds that has
// none yet, and reports whether every wanted inode has a holder now.
func scanFDs(pid int, wanted map[uint64]bool, holders map[uint64]int) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
	d, err := os.Open(dir)
	if err != nil {
		return false
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return false
	}
	// A socket link is "socket:[INODE]", at most 29 bytes; a longer link
	// (a file's path) is truncated into the buffer, and no longer matters.
	var buf [64]byte
	for _, name := range names {
		n, err := syscall.Readlink(dir+name, buf[:])
		if err != nil || n <= 0 {
			continue
		}
		ino, ok := parseSocketLink(string(buf[:n]))
		if !ok || !wanted[ino] {
			continue
		}
		if _, seen := holders[ino]; !seen {
			holders[ino] = pid
			if len(holders) == len(wanted) {
				return true
			}
		}
	}
	return false
}

// Command returns process pid's command line with its arguments joined by
// spaces, or its name (/proc/PID/comm) when the command line is empty (a
// kernel thread, a zombie) or unreadable; "" when neither can be read.
func Command(pid int) string {
	dir := "/proc/" + strconv.Itoa(pid) + "/"
	if data, err := os.ReadFile(dir + "cmdline"); err == nil {
		data = bytes.TrimRight(data, "\x00")
		if len(data) > 0 {
			return string(bytes.ReplaceAll(data, []byte{0}, []byte{' '}))
		}
	}
	if data, err := os.ReadFile(dir + "comm"); err == nil {
		return string(bytes.TrimSpace(data))
	}
	return ""
}
