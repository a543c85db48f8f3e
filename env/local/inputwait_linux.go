package local

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/procstat"
)

// Input waits. A process waits for input when a member of its tree is
// asleep in a system call that reads, or waits to read, the process's
// terminal or its stdin pipe. The kernel says so without any cooperation:
//
//   - /proc/PID/stat: the state (only S, an interruptible sleep, can be a
//     wait for input), the controlling terminal and its foreground group.
//     On a terminal only a member of the foreground group counts: a
//     background reader would be stopped by SIGTTIN, not be waiting.
//   - /proc/PID/syscall: the system call the process sleeps in and its
//     arguments ("running" when it runs). read, readv, pread64, preadv and
//     preadv2 name the descriptor; poll and ppoll, select and pselect6 an
//     array or a bit set in the process's memory, read through
//     /proc/PID/mem (only descriptors polled for reading count);
//     epoll_wait, epoll_pwait and epoll_pwait2 an epoll descriptor, whose
//     /proc/PID/fdinfo lists the files it watches with their inode and
//     device (node's readline waits there). Reading the memory is exact and
//     cheap for a process that sleeps, which is the only kind looked at;
//     treating every poll as a wait would flag any server that polls a
//     socket.
//   - A descriptor is the terminal when it is the pty slave's device, or
//     /dev/tty in a process whose controlling terminal is the slave (less,
//     vim and ssh-keygen open /dev/tty); it is the stdin pipe when its
//     device and inode are those of the pipe (or FIFO) the process got as
//     stdin.
//   - The terminal's line discipline gives the kind: ICANON off is raw,
//     ECHO off (with ICANON) a password, else a line. A non-detached
//     process's termios is read on the master corral holds; a detached
//     one's, whose master the shim server holds, on the slave reopened
//     through /proc/PID/fd with O_NOCTTY|O_NONBLOCK, which changes nothing
//     for the process.
//
// wchan is not used: on current kernels it often reads wait_woken whatever
// the process waits for. Only the main thread of each member is looked
// at (/proc/PID/syscall, not every task's): interpreters and node read
// their terminal from it; a program that reads on another thread is not
// seen. The syscall numbers are the native ones (golang.org/x/sys/unix):
// a 32-bit program on a 64-bit kernel is not recognised, and is left
// unflagged rather than misread.
//
// A look at a process in its own cgroup starts with the cgroup's cpu.stat:
// when nothing in it has run since the last look, that look still holds
// (see inputSeen), and one read answers for an idle tree. Otherwise, a
// look reads each member's syscall file and, only for one asleep in a
// call that reads or polls, its stat and the descriptors concerned: one
// small read for most quiet members, in one pass and one goroutine. The
// state is checked after the call (S: asleep, not a zombie).

var _ env.InputWatcher = (*Env)(nil)

// fileID names an open file: the device and inode of what the
// descriptor refers to.
type fileID struct{ dev, ino uint64 }

func (f fileID) zero() bool { return f == fileID{} }

// inputTarget is what a process reads its input from: the pty slave or
// the stdin pipe, or neither.
type inputTarget struct {
	// tty is the slave's device number (unix.Mkdev encoding, as stat's
	// tty_nr); 0 without a terminal.
	tty uint64
	// pipe is the stdin pipe or FIFO.
	pipe fileID
}

// ptyTarget records slave as the terminal of a non-detached process.
func ptyTarget(slave *os.File) inputTarget {
	var st unix.Stat_t
	if err := unix.Fstat(int(slave.Fd()), &st); err != nil {
		return inputTarget{}
	}
	return inputTarget{tty: st.Rdev}
}

// pipeTarget records r, the read end the process gets as stdin.
func pipeTarget(r *os.File) inputTarget {
	var st unix.Stat_t
	if err := unix.Fstat(int(r.Fd()), &st); err != nil {
		return inputTarget{}
	}
	return inputTarget{pipe: fileID{st.Dev, st.Ino}}
}

// devTTY is /dev/tty's device number: a descriptor opened there reads the
// process's controlling terminal.
var devTTY = unix.Mkdev(5, 0)

// inputJob is one process of an InputWaits call.
type inputJob struct {
	statJob
	target inputTarget
	// master is a non-detached process's pty master; nil otherwise.
	master *os.File
	// leader is the process's PID, for a detached process's terminal.
	leader int
	// cache is the handle's; usage, once read, the cgroup's CPU usage
	// this look is stored with.
	cache *inputCache
	usage *uint64
}

// InputWaits implements env.InputWatcher. Handles of another Env,
// released ones, and processes whose leader has exited get nil.
func (e *Env) InputWaits(ctx context.Context, procs []env.Process) ([]*env.InputWait, error) {
	out := make([]*env.InputWait, len(procs))
	var jobs []inputJob
	locked := childLocks{}
	defer locked.unlock()
	buf := make([]byte, 4096)
	now := time.Now()
	for i, h := range procs {
		var j inputJob
		var d *detached
		switch p := h.(type) {
		case *child:
			if p.env != e || p.released.Load() {
				continue
			}
			// The lock also keeps the master open while the look uses it.
			locked.lock(p)
			if p.exiting || (p.input == inputTarget{}) {
				continue
			}
			j = inputJob{statJob: statJob{i: i, tree: p.tree, leaderLive: true}, target: p.input, master: p.pty, leader: p.pid, cache: &p.inputCache}
		case *detached:
			if p.env != e || p.released.Load() || (!p.st.PTY && !p.st.Stdin) {
				continue
			}
			d = p
			j = inputJob{statJob: statJob{i: i, tree: p.tree, leaderLive: true}, leader: p.st.PID, cache: &p.inputCache}
		default:
			continue
		}
		if w, ok := j.cached(now, buf); ok {
			out[i] = w
			continue
		}
		if d != nil {
			t, ok := detachedTarget(d)
			if !ok {
				// The leader has ended: nothing more to look at.
				d.inputCache.close()
				continue
			}
			j.target = t
		}
		jobs = append(jobs, j)
	}
	if len(jobs) == 0 {
		return out, nil
	}
	members, err := inputMembers(ctx, jobs)
	if err != nil {
		return nil, fmt.Errorf("local: input waits: %w", err)
	}
	for k, j := range jobs {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("local: input waits: %w", err)
		}
		w := j.look(members[k], buf)
		out[j.i] = w
		if j.usage != nil {
			j.cache.store(&inputSeen{usage: *j.usage, at: now, wait: w})
		}
	}
	return out, nil
}

// inputSeen is a handle's last look, valid while its cgroup has not run:
// a process that does not run cannot enter or leave a system call, fork,
// exit, change its terminal's modes or foreground group, or be given
// input (a write wakes the reader).
type inputSeen struct {
	usage uint64 // the cgroup's cpu.stat usage_usec
	at    time.Time
	wait  *env.InputWait
}

// inputSeenMax bounds how long a look is reused, against what changes
// without the tree running (another program setting the terminal's modes).
const inputSeenMax = 5 * time.Second

// inputCache is a handle's last look and its cgroup's cpu.stat, kept open
// so that a look at an idle tree is one read: a fresh open and close cost
// more than the read. The handle closes it once the process has ended or
// is released; the zero value is ready.
type inputCache struct {
	mu     sync.Mutex
	stat   *os.File
	closed bool
	seen   *inputSeen
}

// usage reads usage_usec, the CPU time of everything that ran in the
// cgroup at dir, from its cpu.stat (present with or without the cpu
// controller), and the last look.
func (c *inputCache) usage(dir string, buf []byte) (uint64, *inputSeen, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, nil, false
	}
	if c.stat == nil {
		f, err := os.Open(dir + "/cpu.stat")
		if err != nil {
			return 0, nil, false
		}
		c.stat = f
	}
	// A read at offset 0 makes the kernel write the file anew.
	n, err := c.stat.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, nil, false
	}
	rest, ok := bytes.CutPrefix(buf[:n], []byte("usage_usec "))
	if !ok {
		return 0, nil, false
	}
	if i := bytes.IndexByte(rest, '\n'); i >= 0 {
		rest = rest[:i]
	}
	v, err := strconv.ParseUint(string(rest), 10, 64)
	return v, c.seen, err == nil
}

func (c *inputCache) store(s *inputSeen) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.seen = s
	}
}

func (c *inputCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.seen = nil
	if c.stat != nil {
		_ = c.stat.Close()
		c.stat = nil
	}
}

// cached returns the last look's result when the job's cgroup has not run
// since; otherwise it notes the cgroup's usage for the look to be stored.
func (j *inputJob) cached(now time.Time, buf []byte) (*env.InputWait, bool) {
	cg, ok := j.tree.(*cgroupTree)
	if !ok {
		return nil, false
	}
	usage, prev, ok := j.cache.usage(cg.dir, buf)
	if !ok {
		return nil, false
	}
	if prev != nil && prev.usage == usage && now.Sub(prev.at) < inputSeenMax {
		if prev.wait == nil {
			return nil, true
		}
		w := *prev.wait
		return &w, true
	}
	j.usage = &usage
	return nil, false
}

// inputMembers lists each job's members. A cgroup's are its cgroup.procs,
// read bare: look reads each member's stat anyway (and skips zombies), so
// the survivors' own stat reads would double the cost of a look. Without a
// cgroup they are the leader and its descendants, walked down the
// /proc/PID/task/PID/children lists: a look then costs in proportion to
// the tree, where the tag scan that finds a tree's escapees too reads every
// process of the machine (more than 1 % of a core for 100 trees looked at
// twice a second). A descendant that left the tree by double-forking is
// not looked at; a prompt is read by the job in the foreground.
func inputMembers(ctx context.Context, jobs []inputJob) ([][]int, error) {
	members := make([][]int, len(jobs))
	var buf []byte
	for k, j := range jobs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		cg, ok := j.tree.(*cgroupTree)
		if !ok {
			members[k], buf = descendants(j.leader, buf)
			continue
		}
		data, err := readProcAll(cg.dir+"/cgroup.procs", buf[:0])
		if cgroupGone(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		buf = data
		for f := range bytes.FieldsSeq(data) {
			if pid, err := strconv.Atoi(string(f)); err == nil {
				members[k] = append(members[k], pid)
			}
		}
	}
	return members, nil
}

// maxInputMembers bounds a descendants walk: a prompt's tree is a few
// processes; a build's may be large, and is not waiting for input.
const maxInputMembers = 1024

// descendants lists leader and the processes below it, as the main
// thread of each lists its children.
func descendants(leader int, buf []byte) ([]int, []byte) {
	pids := []int{leader}
	for i := 0; i < len(pids) && len(pids) < maxInputMembers; i++ {
		p := strconv.Itoa(pids[i])
		data, err := readProcAll("/proc/"+p+"/task/"+p+"/children", buf[:0])
		if err != nil {
			continue
		}
		buf = data
		for f := range bytes.FieldsSeq(data) {
			if pid, err := strconv.Atoi(string(f)); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids, buf
}

// readProcAll reads a /proc or cgroup file with bare system calls,
// appending to buf. os.ReadFile's stat, poller registration and
// allocations cost several times the read itself on these files, which
// a look reads for every member of every process.
func readProcAll(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, make([]byte, max(512, cap(buf)))...)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// detachedTarget finds a detached process's terminal or stdin from its
// leader's standard input, which the shim server set up; false once the
// leader has ended or no longer has it.
func detachedTarget(d *detached) (inputTarget, bool) {
	st, err := procstat.Read(d.st.PID)
	if err != nil || st.StartTime != d.st.StartTime || st.Exited() {
		return inputTarget{}, false
	}
	if d.st.PTY {
		if st.TTY == 0 {
			return inputTarget{}, false
		}
		return inputTarget{tty: st.TTY}, true
	}
	var fst unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(d.st.PID)+"/fd/0", &fst); err != nil || fst.Mode&unix.S_IFMT != unix.S_IFIFO {
		return inputTarget{}, false
	}
	return inputTarget{pipe: fileID{fst.Dev, fst.Ino}}, true
}

// look returns how the first member found waiting waits, or nil.
func (j inputJob) look(pids []int, buf []byte) *env.InputWait {
	for _, pid := range pids {
		// The syscall file first: most quiet members sleep in a call that
		// is no read (a timer, wait4, accept), and one read settles them.
		dir := "/proc/" + strconv.Itoa(pid)
		nr, args, ok := readSyscall(dir+"/syscall", buf)
		if !ok || sysKinds[nr] == sysNone {
			continue
		}
		data, err := readProcAll(dir+"/stat", buf[:0])
		if err != nil {
			continue
		}
		st, err := procstat.Parse(data)
		if err != nil || st.State != 'S' {
			continue
		}
		onTTY := j.target.tty != 0 && st.TTY == j.target.tty && st.PGID == st.TPGID
		if !onTTY && j.target.pipe.zero() {
			continue
		}
		fd, ok := j.readsInput(dir, nr, args, st, onTTY)
		if !ok {
			continue
		}
		if j.target.tty == 0 {
			return &env.InputWait{Kind: env.InputPipe}
		}
		kind, ok := j.termKind(pid, fd)
		if !ok {
			continue
		}
		return &env.InputWait{Kind: kind}
	}
	return nil
}

// readsInput reports whether the process at dir, asleep in system call nr
// with args, reads or waits to read the target (the terminal only when
// onTTY), and on which descriptor.
func (j inputJob) readsInput(dir string, nr int, args [6]uint64, st procstat.Stat, onTTY bool) (int, bool) {
	is := func(fd int) bool { return fd >= 0 && j.isInput(dir, fd, st, onTTY) }
	switch sysKinds[nr] {
	case sysRead:
		fd := int(int32(args[0]))
		return fd, is(fd)
	case sysPoll:
		return pollFDs(dir, args[0], args[1], is)
	case sysSelect:
		return selectFDs(dir, args[0], args[1], is)
	case sysEpoll:
		return j.epollWatches(dir, int(int32(args[0])), st, onTTY)
	}
	return 0, false
}

// isInput reports whether descriptor fd of the process at dir is the
// target.
func (j inputJob) isInput(dir string, fd int, st procstat.Stat, onTTY bool) bool {
	var fst unix.Stat_t
	if err := unix.Stat(dir+"/fd/"+strconv.Itoa(fd), &fst); err != nil {
		return false
	}
	return j.matches(fst.Mode, fst.Rdev, fileID{fst.Dev, fst.Ino}, st, onTTY)
}

func (j inputJob) matches(mode uint32, rdev uint64, id fileID, st procstat.Stat, onTTY bool) bool {
	switch mode & unix.S_IFMT {
	case unix.S_IFCHR:
		return onTTY && (rdev == j.target.tty || (rdev == devTTY && st.TTY == j.target.tty))
	case unix.S_IFIFO:
		return !j.target.pipe.zero() && id == j.target.pipe
	}
	return false
}

// readSyscall parses /proc/PID/syscall: the number and the six arguments
// of the system call the task sleeps in; false when it runs or is not in
// one.
func readSyscall(path string, buf []byte) (int, [6]uint64, bool) {
	var args [6]uint64
	data, err := readProcAll(path, buf[:0])
	if err != nil {
		return 0, args, false
	}
	fields := bytes.Fields(data)
	if len(fields) < 7 {
		return 0, args, false // "running", or "-1 SP PC" outside a call
	}
	nr, err := strconv.Atoi(string(fields[0]))
	if err != nil || nr < 0 {
		return 0, args, false
	}
	for i := range args {
		v, err := strconv.ParseUint(string(bytes.TrimPrefix(fields[1+i], []byte("0x"))), 16, 64)
		if err != nil {
			return 0, args, false
		}
		args[i] = v
	}
	return nr, args, true
}

// sysKind groups the system calls that can be a wait for input by where
// their descriptors are.
type sysKind int

const (
	sysNone   sysKind = iota
	sysRead           // the first argument is the descriptor
	sysPoll           // a struct pollfd array and its length
	sysSelect         // nfds and the read fd_set
	sysEpoll          // the epoll descriptor
)

// sysKinds maps native syscall numbers; archSysKinds adds the calls only
// some architectures have (poll, select, epoll_wait).
var sysKinds = func() map[int]sysKind {
	m := map[int]sysKind{
		unix.SYS_READ: sysRead, unix.SYS_READV: sysRead, unix.SYS_PREAD64: sysRead,
		unix.SYS_PREADV: sysRead, unix.SYS_PREADV2: sysRead,
		unix.SYS_PPOLL:       sysPoll,
		unix.SYS_PSELECT6:    sysSelect,
		unix.SYS_EPOLL_PWAIT: sysEpoll, unix.SYS_EPOLL_PWAIT2: sysEpoll,
	}
	for nr, k := range archSysKinds {
		m[nr] = k
	}
	return m
}()

// maxPollFDs bounds what is read of a poll array or select set: a prompt
// polls a handful; a server polling thousands is not one.
const maxPollFDs = 4096

// pollRDNORM is POLLRDNORM (asm-generic/poll.h), which x/sys/unix does
// not name.
const pollRDNORM = 0x40

// readMem reads n bytes at addr of the process at dir.
func readMem(dir string, addr uint64, n int) ([]byte, bool) {
	if addr == 0 || n <= 0 || addr > 1<<63-1 {
		return nil, false
	}
	f, err := os.Open(dir + "/mem")
	if err != nil {
		return nil, false
	}
	defer f.Close()
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, int64(addr)); err != nil {
		return nil, false
	}
	return buf, true
}

// pollFDs finds, in a sleeping poll's struct pollfd array (int fd, short
// events, short revents), a descriptor polled for reading that is.
func pollFDs(dir string, addr, nfds uint64, is func(int) bool) (int, bool) {
	if nfds == 0 || nfds > maxPollFDs {
		return 0, false
	}
	buf, ok := readMem(dir, addr, int(nfds)*8)
	if !ok {
		return 0, false
	}
	for i := 0; i+8 <= len(buf); i += 8 {
		fd := int(int32(binary.NativeEndian.Uint32(buf[i:])))
		events := binary.NativeEndian.Uint16(buf[i+4:])
		if events&(unix.POLLIN|unix.POLLPRI|pollRDNORM) != 0 && is(fd) {
			return fd, true
		}
	}
	return 0, false
}

// selectFDs finds, in a sleeping select's read set (an array of longs,
// bit fd%W of long fd/W for W-bit longs), a descriptor that is.
func selectFDs(dir string, nfds, readfds uint64, is func(int) bool) (int, bool) {
	if nfds == 0 || nfds > maxPollFDs || readfds == 0 {
		return 0, false
	}
	const wordBytes = strconv.IntSize / 8
	words := (int(nfds) + strconv.IntSize - 1) / strconv.IntSize
	buf, ok := readMem(dir, readfds, words*wordBytes)
	if !ok {
		return 0, false
	}
	for fd := 0; fd < int(nfds); fd++ {
		w := buf[fd/strconv.IntSize*wordBytes:]
		var word uint64
		if wordBytes == 8 {
			word = binary.NativeEndian.Uint64(w)
		} else {
			word = uint64(binary.NativeEndian.Uint32(w))
		}
		if word&(1<<(fd%strconv.IntSize)) != 0 && is(fd) {
			return fd, true
		}
	}
	return 0, false
}

// epollWatches finds, among the files epoll descriptor epfd watches for
// reading (its fdinfo's "tfd: N events: MASK data: D pos:P ino:I
// sdev:S" lines), one that is the target. The inode and device identify
// the file even if the descriptor number was closed since.
func (j inputJob) epollWatches(dir string, epfd int, st procstat.Stat, onTTY bool) (int, bool) {
	if epfd < 0 {
		return 0, false
	}
	data, err := os.ReadFile(dir + "/fdinfo/" + strconv.Itoa(epfd))
	if err != nil {
		return 0, false
	}
	for line := range bytes.Lines(data) {
		rest, ok := bytes.CutPrefix(line, []byte("tfd:"))
		if !ok {
			continue
		}
		w, ok := parseEpollLine(rest)
		if !ok || w.events&(unix.EPOLLIN|unix.EPOLLRDNORM|unix.EPOLLPRI) == 0 {
			continue
		}
		mode, rdev, ok := j.watched(dir, w)
		if ok && j.matches(mode, rdev, w.id, st, onTTY) {
			return w.fd, true
		}
	}
	return 0, false
}

// epollWatch is one line of an epoll descriptor's fdinfo.
type epollWatch struct {
	fd     int
	events uint32
	id     fileID
}

func parseEpollLine(rest []byte) (epollWatch, bool) {
	var w epollWatch
	f := bytes.Fields(rest)
	if len(f) < 1 {
		return w, false
	}
	fd, err := strconv.Atoi(string(f[0]))
	if err != nil {
		return w, false
	}
	w.fd = fd
	var haveEv, haveIno, haveDev bool
	for i := 1; i < len(f); i++ {
		switch {
		case string(f[i]) == "events:" && i+1 < len(f):
			v, err := strconv.ParseUint(string(f[i+1]), 16, 32)
			w.events, haveEv = uint32(v), err == nil
		case bytes.HasPrefix(f[i], []byte("ino:")):
			v, err := strconv.ParseUint(string(f[i][4:]), 16, 64)
			w.id.ino, haveIno = v, err == nil
		case bytes.HasPrefix(f[i], []byte("sdev:")):
			// The kernel's own dev_t: 12 bits of major above 20 of minor.
			v, err := strconv.ParseUint(string(f[i][5:]), 16, 64)
			w.id.dev, haveDev = unix.Mkdev(uint32(v>>20), uint32(v&(1<<20-1))), err == nil
		}
	}
	return w, haveEv && haveIno && haveDev
}

// watched returns the type and device of the file an epoll line names,
// from its descriptor when that still refers to the same file (a pipe's
// identity needs no more; a terminal's device number does).
func (j inputJob) watched(dir string, w epollWatch) (mode uint32, rdev uint64, ok bool) {
	var fst unix.Stat_t
	if err := unix.Stat(dir+"/fd/"+strconv.Itoa(w.fd), &fst); err != nil || (fileID{fst.Dev, fst.Ino}) != w.id {
		return 0, 0, false
	}
	return fst.Mode, fst.Rdev, true
}

// termKind reads the terminal's line discipline flags: on the master a
// non-detached process's handle holds, else on the slave reopened from
// the reader's descriptor or the leader's standard streams.
func (j inputJob) termKind(reader, fd int) (string, bool) {
	var tio *unix.Termios
	if j.master != nil {
		rc, err := j.master.SyscallConn()
		if err != nil {
			return "", false
		}
		var ioErr error
		if err := rc.Control(func(m uintptr) { tio, ioErr = unix.IoctlGetTermios(int(m), unix.TCGETS) }); err != nil || ioErr != nil {
			return "", false
		}
	} else {
		paths := []string{"/proc/" + strconv.Itoa(reader) + "/fd/" + strconv.Itoa(fd)}
		for s := range 3 {
			paths = append(paths, "/proc/"+strconv.Itoa(j.leader)+"/fd/"+strconv.Itoa(s))
		}
		for _, p := range paths {
			if tio = slaveTermios(p, j.target.tty); tio != nil {
				break
			}
		}
		if tio == nil {
			return "", false
		}
	}
	switch {
	case tio.Lflag&unix.ICANON == 0:
		return env.InputRaw, true
	case tio.Lflag&unix.ECHO == 0:
		return env.InputPassword, true
	}
	return env.InputLine, true
}

// slaveTermios opens path if it is the terminal tty and reads its
// termios; nil otherwise. O_NOCTTY: the supervisor must never acquire the
// process's terminal; O_NONBLOCK: opening never waits for a carrier.
func slaveTermios(path string, tty uint64) *unix.Termios {
	var fst unix.Stat_t
	if err := unix.Stat(path, &fst); err != nil || fst.Mode&unix.S_IFMT != unix.S_IFCHR || fst.Rdev != tty {
		return nil
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	var again unix.Stat_t
	if err := unix.Fstat(fd, &again); err != nil || again.Rdev != tty {
		return nil
	}
	tio, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil
	}
	return tio
}
