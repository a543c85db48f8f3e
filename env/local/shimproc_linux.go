package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corralhq/corral/internal/procstat"
	"golang.org/x/sys/unix"
)

// serverProc is one running command as the server sees it.
type serverProc struct {
	s      *shimServer
	id     string
	dir    string
	pid    int
	cgroup string // absolute cgroup directory, "" in pgroup+scan mode
	oom    oomCounter
	limits *limitGroups // the cgroups of the command's env.Limits

	stdinOnce sync.Once
	stdinKeep *os.File // our write end of the FIFO: EOF only once we let go
	stdinWD   int      // inotify watch of dir for the stdin.closed marker
	over      bool     // the leader ended (guarded by the watcher's mu)

	// Terminal processes only.
	ptyMu   sync.Mutex
	master  *os.File // nil once closed
	stdinR  *os.File // FIFO read end the copier forwards into the master
	exitWS  chan unix.WaitStatus
	logFile *os.File
}

// startProc runs one command and records its state.
func (s *shimServer) startProc(cfg *shimConfig) (*shimState, error) {
	dir, err := s.procDir(cfg)
	if err != nil {
		return nil, err
	}
	p := &serverProc{s: s, id: cfg.ID, dir: dir, stdinWD: -1}
	l := &launch{sys: &syscall.SysProcAttr{Setsid: true}}
	defer l.close()
	if err := p.openStdio(cfg, l); err != nil {
		return nil, p.abortStart(err)
	}
	if err := p.placeTree(cfg, l); err != nil {
		return nil, p.abortStart(err)
	}
	if cfg.Limits != nil || cfg.Ceiling != "" {
		if cfg.Limits != nil {
			if err := cfg.Limits.Validate(); err != nil {
				return nil, p.abortStart(fmt.Errorf("start: %w", err))
			}
		}
		if cfg.Ceiling != "" && !validCeiling(cfg.Ceiling) {
			return nil, p.abortStart(errors.New("start: malformed ceiling"))
		}
		sys := &system{limits: hostLimits(cfg.CgroupBase), ceiling: cfg.Ceiling}
		if p.limits, err = sys.newLimitGroups(cfg.ID, p.cgroup, cfg.Limits); err != nil {
			return nil, p.abortStart(err)
		}
	}
	// Counted before the fork: an OOM kill before it is not this one's.
	p.oom = p.limits.oomCounter(s.oom.counter(p.cgroup))
	s.forkMu.RLock()
	startTime, err := p.fork(cfg, l)
	if err != nil {
		s.forkMu.RUnlock()
		return nil, p.abortStart(err)
	}
	// The exit is appended to state.json: the reaper must not record it
	// before the file exists, so the read lock is held until then.
	defer s.forkMu.RUnlock()

	st := &shimState{PID: p.pid, StartTime: startTime, Tag: cfg.Tag, ShimPID: s.pid, ShimStart: s.start,
		Stdin: cfg.Stdin, PTY: cfg.PTY != nil, SpecTag: cfg.SpecTag, CommandLine: cfg.Command, Server: shimProtocol}
	if p.cgroup != "" {
		st.Cgroup = filepath.Join(cfg.CgroupRel, cfg.ID)
	}
	p.startIO()
	if err := writeJSONAtomic(filepath.Join(dir, fileState), st); err != nil {
		// The command runs; without its state nobody can attach. Kill it
		// rather than leave an unmanageable process behind; the reaper
		// records its end.
		_ = unix.Kill(-p.pid, unix.SIGKILL)
		return nil, fmt.Errorf("record state: %w", err)
	}
	return st, nil
}

// launch gathers, step by step, what the fork of a command needs.
type launch struct {
	sys     *syscall.SysProcAttr
	files   []uintptr // the command's stdin, stdout and stderr
	environ []string
	// closeAfter are the server's copies of descriptors only the command
	// keeps; they are closed once the fork is done or given up.
	closeAfter []*os.File
}

func (l *launch) close() {
	if l.sys.UseCgroupFD {
		_ = unix.Close(l.sys.CgroupFD)
	}
	for _, f := range l.closeAfter {
		_ = f.Close()
	}
}

// procDir checks a start request and returns the process's directory.
// Never trust a path from a request: the directory is this id's, inside
// our own state directory, made by the supervisor.
func (s *shimServer) procDir(cfg *shimConfig) (string, error) {
	if cfg == nil || !validID(cfg.ID) {
		return "", errors.New("start: malformed request")
	}
	dir := filepath.Join(s.stateDir, cfg.ID)
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("start: process directory %s: not a directory (%v)", dir, err)
	}
	if fileExists(filepath.Join(dir, fileState)) {
		return "", fmt.Errorf("start: %s already ran a process", dir)
	}
	return dir, nil
}

// abortStart releases what a start that failed before the command ran
// holds, and returns err.
func (p *serverProc) abortStart(err error) error {
	p.closeStdin()
	if p.stdinR != nil {
		_ = p.stdinR.Close()
	}
	if p.master != nil {
		_ = p.master.Close()
	}
	if p.logFile != nil {
		_ = p.logFile.Close()
	}
	p.limits.remove()
	if p.cgroup != "" {
		_ = os.Remove(p.cgroup)
	}
	return err
}

// openStdio gives the command its standard files. With pipes, its output
// goes straight to the log; with a terminal, it gets the slave and the
// server keeps the master, to copy into the log.
func (p *serverProc) openStdio(cfg *shimConfig, l *launch) error {
	logf, err := os.OpenFile(filepath.Join(p.dir, fileLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	stdin, err := p.openStdin(cfg, l)
	if err != nil {
		_ = logf.Close()
		return err
	}
	if cfg.PTY == nil {
		l.closeAfter = append(l.closeAfter, logf)
		l.files = []uintptr{stdin.Fd(), logf.Fd(), logf.Fd()}
		return nil
	}
	master, slave, err := openPTY(*cfg.PTY)
	if err != nil {
		_ = logf.Close()
		return fmt.Errorf("open pty: %w", err)
	}
	l.closeAfter = append(l.closeAfter, slave)
	p.master, p.logFile = master, logf
	p.exitWS = make(chan unix.WaitStatus, 1)
	l.files = []uintptr{slave.Fd(), slave.Fd(), slave.Fd()}
	l.sys.Setctty, l.sys.Ctty = true, 0
	return nil
}

// openStdin makes the stdin FIFO of a command that takes input, and
// returns the command's stdin with pipes: the FIFO, or /dev/null. With a
// terminal it returns nil: the server forwards the FIFO into the terminal.
func (p *serverProc) openStdin(cfg *shimConfig, l *launch) (*os.File, error) {
	if !cfg.Stdin {
		if cfg.PTY != nil {
			return nil, nil
		}
		f, err := os.Open(os.DevNull)
		if err != nil {
			return nil, err
		}
		l.closeAfter = append(l.closeAfter, f)
		return f, nil
	}
	fifo := filepath.Join(p.dir, fileStdin)
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		return nil, fmt.Errorf("create stdin fifo: %w", err)
	}
	// Open the read end without waiting for a writer, then hold a write
	// end ourselves: the reader sees EOF only when we let go.
	rfd, err := unix.Open(fifo, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open stdin fifo: %w", err)
	}
	wfd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = unix.Close(rfd)
		return nil, fmt.Errorf("open stdin fifo for writing: %w", err)
	}
	p.stdinKeep = os.NewFile(uintptr(wfd), fifo)
	if cfg.PTY != nil {
		// The server forwards what arrives into the terminal; the read
		// end stays non-blocking, in Go's poller.
		p.stdinR = os.NewFile(uintptr(rfd), fifo)
		return nil, nil
	}
	if err := unix.SetNonblock(rfd, false); err != nil {
		_ = unix.Close(rfd)
		return nil, err
	}
	f := os.NewFile(uintptr(rfd), fifo)
	l.closeAfter = append(l.closeAfter, f)
	return f, nil
}

// placeTree makes the command's tree findable: it starts in a cgroup of
// its own (entered at the fork, so no descendant escapes it), or, in
// pgroup+scan mode, with the tree tag in its environment, which its
// descendants inherit.
func (p *serverProc) placeTree(cfg *shimConfig, l *launch) error {
	l.environ = dropVars(cfg.Env, func(name string) bool { return name == shimEnvVar })
	if cfg.CgroupBase == "" {
		if !strings.HasPrefix(cfg.Tag, treeTagPrefix) || cfg.Tag != treeTagPrefix+cfg.ID {
			return fmt.Errorf("start: tree tag %q is not %s%s", cfg.Tag, treeTagPrefix, cfg.ID)
		}
		l.environ = append(l.environ, cfg.Tag+"=1")
		return nil
	}
	p.cgroup = filepath.Join(cfg.CgroupBase, cfg.ID)
	if err := os.Mkdir(p.cgroup, 0o755); err != nil {
		p.cgroup = ""
		return fmt.Errorf("create cgroup: %w", err)
	}
	fd, err := unix.Open(p.cgroup, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open cgroup: %w", err)
	}
	l.sys.UseCgroupFD, l.sys.CgroupFD = true, fd
	return nil
}

// fork starts the command's shell and registers it with the server. The
// caller holds forkMu read-locked, so the reaper cannot take the child
// before it is registered. It returns the leader's start time, 0 where
// /proc did not tell.
func (p *serverProc) fork(cfg *shimConfig, l *launch) (uint64, error) {
	s := p.s
	var pid int
	err := p.limits.fork(func() (err error) {
		pid, err = forkExecUnmasked("/bin/sh", []string{"/bin/sh", "-c", cfg.Command}, &syscall.ProcAttr{
			Dir: cfg.Dir, Env: l.environ, Files: l.files, Sys: l.sys,
		})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("start /bin/sh: %w", err)
	}
	p.pid = pid
	var startTime uint64
	if st, err := procstat.Read(pid); err == nil {
		startTime = st.StartTime
	}
	s.mu.Lock()
	s.procs[pid] = p
	if p.master != nil {
		s.ptys[p.id] = p
	}
	s.mu.Unlock()
	return startTime, nil
}

// startIO starts serving a running command's input and output: the
// terminal copier and stdin forwarder of a terminal, and the watch for
// the stdin.closed marker.
func (p *serverProc) startIO() {
	s := p.s
	if p.master != nil {
		s.work.Add(1)
		go p.copyTerminal()
		if p.stdinR != nil {
			s.work.Add(1)
			go p.forwardStdin()
		}
	}
	if p.stdinKeep != nil {
		s.stdin.watch(p)
	}
}

// forkExecUnmasked is syscall.ForkExec with no signal blocked in the
// child. A Go child starts with the signal mask its forking thread has at
// that moment, which is not always empty (under the race detector a
// thread can block almost everything); the command must start with an
// empty mask, as a plain sh -c from the supervisor does. So the fork runs
// on a locked thread whose mask was just cleared.
func forkExecUnmasked(argv0 string, argv []string, attr *syscall.ProcAttr) (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var empty unix.Sigset_t
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, &empty, nil); err != nil {
		return 0, fmt.Errorf("clear the signal mask: %w", err)
	}
	return syscall.ForkExec(argv0, argv, attr)
}

// reapAndCheck reaps every child that ended, records the leaders' exits,
// and decides whether the server is done: no child left (leaders and
// orphans alike) and no client connected. It returns true when the server
// must exit, with the listener closed.
func (s *shimServer) reapAndCheck() bool {
	type ended struct {
		p  *serverProc
		ws unix.WaitStatus
	}
	var exits []ended
	none := false
	s.forkMu.Lock()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.ECHILD) {
			none = true
			break
		}
		if err != nil {
			s.log.Error("wait", "err", err)
			break
		}
		if pid == 0 {
			break
		}
		s.mu.Lock()
		p := s.procs[pid]
		delete(s.procs, pid)
		s.mu.Unlock()
		if p != nil {
			exits = append(exits, ended{p, ws})
		}
	}
	done := false
	s.mu.Lock()
	if none && s.clients == 0 {
		s.exiting, done = true, true
		_ = s.ln.Close()
	}
	s.mu.Unlock()
	s.forkMu.Unlock()

	for _, e := range exits {
		e.p.ended(e.ws)
	}
	s.removeEmptyCgroups(none)
	return done
}

// ended handles the leader's end: the exit is recorded at once for pipes;
// for a terminal, after what the leader wrote is copied into the log.
func (p *serverProc) ended(ws unix.WaitStatus) {
	p.s.stdin.unwatch(p)
	p.closeStdin()
	if p.cgroup != "" || p.limits != nil {
		p.s.mu.Lock()
		if p.cgroup != "" {
			p.s.cgroups = append(p.s.cgroups, p.cgroup)
		}
		if p.limits != nil {
			p.s.cgroups = append(p.s.cgroups, p.limits.v1...)
		}
		p.s.mu.Unlock()
	}
	if p.exitWS != nil {
		p.exitWS <- ws
		p.ptyMu.Lock()
		if p.master != nil {
			// Interrupt the copier's read so it drains and records.
			_ = p.master.SetReadDeadline(time.Now())
		}
		p.ptyMu.Unlock()
		return
	}
	p.recordExit(ws)
}

// recordExit appends the exit status to state.json as its second line.
// Appending to a file that exists allocates no inode: on ext4 with many
// recent deletions (a busy state directory) creating a file costs up to a
// millisecond, which a separate exit file would add to every exit seen.
// A reader sees the line whole or not at all (one small write, and it
// parses only a complete line); O_APPEND without O_CREAT never recreates
// a removed directory's file.
func (p *serverProc) recordExit(ws unix.WaitStatus) {
	status := p.oom.mark(statusFromWait(syscall.WaitStatus(ws)))
	if err := appendExit(filepath.Join(p.dir, fileState), status); err != nil {
		// The directory may be gone (removed by its owner): never
		// recreate it.
		p.s.log.Warn("record exit", "id", p.id, "err", err)
		p.diag("record exit: %v", err)
	}
}

// diag appends a line to the process's shim.log, if its directory still
// exists.
func (p *serverProc) diag(format string, args ...any) {
	f, err := os.OpenFile(filepath.Join(p.dir, fileShimLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s corral shim server %d: %s\n", time.Now().Format(time.RFC3339Nano), p.s.pid, fmt.Sprintf(format, args...))
}

// removeEmptyCgroups removes the cgroups of ended leaders once nothing is
// left in them (the kernel refuses to remove a populated one). With no
// child left at all, every one of them is empty.
func (s *shimServer) removeEmptyCgroups(none bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.cgroups[:0]
	for _, dir := range s.cgroups {
		err := os.Remove(dir)
		if err != nil && !cgroupGone(err) && !none {
			kept = append(kept, dir)
		}
	}
	s.cgroups = kept
	if len(kept) > 0 && !s.cgroupRetry {
		// The kernel lets a cgroup go a moment after its last member is
		// reaped; without a later look, only the next exit or the
		// server's own end would remove it.
		s.cgroupRetry = true
		time.AfterFunc(cgroupRetryDelay, func() {
			s.mu.Lock()
			s.cgroupRetry = false
			s.mu.Unlock()
			s.poke()
		})
	}
}

// cgroupRetryDelay spaces the looks at cgroups the kernel did not let go.
const cgroupRetryDelay = 200 * time.Millisecond

// closeStdin lets go of the server's write end of the stdin FIFO.
func (p *serverProc) closeStdin() {
	p.stdinOnce.Do(func() {
		if p.stdinKeep != nil {
			_ = p.stdinKeep.Close()
		}
	})
}
