package local

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/procstat"
	"golang.org/x/sys/unix"
)

// Files of a detached process's directory.
const (
	fileState       = "state.json"
	fileLog         = "log"
	fileExit        = "exit"
	fileStdin       = "stdin"
	fileStdinClosed = "stdin.closed"
	fileShimLog     = "shim.log"
	// fileCommand holds a command too long for argv, which the shell
	// sources (see env.InlineCommandMax).
	fileCommand = "command"
	// fileOmitted records the range of the log dropped to keep it
	// bounded (see env.LogKeep).
	fileOmitted = "omitted"
)

// readyFD is the descriptor on which a starting shim server reports "ok"
// (or the reason it failed) to the supervisor that started it.
const readyFD = 3

// shimConfig is what a supervisor asks the shim server to run.
type shimConfig struct {
	Command string `json:"command"`
	Dir     string `json:"dir,omitempty"`
	// Env is the command's whole environment (the server's own is not
	// passed on).
	Env   []string `json:"env"`
	Stdin bool     `json:"stdin"`
	// PTY, when set, runs the command on a terminal of this size whose
	// master the server holds.
	PTY *env.WindowSize `json:"pty,omitempty"`
	ID  string          `json:"id"`
	// CgroupBase and CgroupRel place the command's cgroup; empty for
	// pgroup+scan, which uses Tag instead.
	CgroupBase string `json:"cgroup_base,omitempty"`
	CgroupRel  string `json:"cgroup_rel,omitempty"`
	Tag        string `json:"tag,omitempty"`
	SpecTag    string `json:"spec_tag,omitempty"`
}

// shimState is what the server records once the command runs.
type shimState struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
	// Cgroup is the command's cgroup as /proc/PID/cgroup shows it.
	Cgroup string `json:"cgroup,omitempty"`
	Tag    string `json:"tag,omitempty"`
	// ShimPID and ShimStart name the shim server that runs the command.
	ShimPID     int    `json:"shim_pid"`
	ShimStart   uint64 `json:"shim_start_time"`
	Stdin       bool   `json:"stdin"`
	PTY         bool   `json:"pty,omitempty"`
	SpecTag     string `json:"spec_tag,omitempty"`
	CommandLine string `json:"command"`
	// Server is the protocol version of the shim server that runs the
	// process, which records the exit as a second line of state.json; 0
	// names the per-process shim of earlier versions, which wrote a
	// separate exit file.
	Server int `json:"server,omitempty"`
}

// leader and shim are the recorded identities of the command and of the
// shim server that runs it.
func (s shimState) leader() procstat.Identity {
	return procstat.Identity{PID: s.PID, StartTime: s.StartTime}
}

func (s shimState) shim() procstat.Identity {
	return procstat.Identity{PID: s.ShimPID, StartTime: s.ShimStart}
}

// shimProtocol is the version of the conversation between supervisor and
// shim server. It is part of the socket's and the lock's names, so servers
// of different versions never meet: an old server keeps running the
// processes it started (their files work for Attach whatever the version)
// and a new one takes new starts.
const shimProtocol = 1

// shimHello is what the server sends first on every connection.
type shimHello struct {
	Version   int    `json:"version"`
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
}

// shimRequest is one request; exactly one reply follows it.
type shimRequest struct {
	Op    string          `json:"op"` // "start" or "resize"
	ID    string          `json:"id"`
	Start *shimConfig     `json:"start,omitempty"`
	Size  *env.WindowSize `json:"size,omitempty"`
}

type shimReply struct {
	Error string     `json:"error,omitempty"`
	State *shimState `json:"state,omitempty"`
	// Gone: the request named a process the server no longer holds (it
	// exited, or another server runs it).
	Gone bool `json:"gone,omitempty"`
}

func init() {
	v, ok := os.LookupEnv(shimEnvVar)
	if !ok {
		return
	}
	// This process is a shim server, not the program it is a copy of: run
	// it and never return to main. syscall.Exit, not os.Exit: a
	// race-enabled binary would otherwise linger a second in the race
	// runtime's exit hook.
	syscall.Exit(shimMain(v))
}

func shimMain(v string) int {
	stage, stateDir, ok := strings.Cut(v, ":")
	if !ok || !filepath.IsAbs(stateDir) {
		fmt.Fprintf(os.Stderr, "corral shim: malformed %s\n", shimEnvVar)
		return 2
	}
	// Neither the second stage nor any command may inherit the readiness
	// pipe, or the supervisor would wait for them to end.
	unix.CloseOnExec(readyFD)
	ready := ready()
	switch stage {
	case "1":
		// Start the real server and leave at once, so the supervisor reaps
		// this stage and the server is re-parented away from it.
		self, err := shimExecutable()
		if err == nil {
			cmd := exec.Command(self)
			cmd.Args = []string{"corral-shim"}
			cmd.Env = append(os.Environ()[:0:0], shimEnvVar+"=2:"+stateDir)
			cmd.Stderr = os.Stderr
			cmd.ExtraFiles = []*os.File{ready}
			err = cmd.Start()
			if err == nil {
				_ = cmd.Process.Release()
				return 0
			}
		}
		fmt.Fprintf(ready, "start shim server: %v", err)
		return 1
	case "2":
		if err := runShimServer(stateDir, ready); err != nil {
			fmt.Fprintf(os.Stderr, "corral shim server %s: %v\n", stateDir, err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "corral shim: unknown stage %q\n", stage)
	return 2
}

func ready() *os.File { return os.NewFile(readyFD, "ready") }

// shimServer runs the detached processes of one state directory.
type shimServer struct {
	stateDir string
	log      *slog.Logger
	pid      int
	start    uint64
	ln       *net.UnixListener

	// forkMu is read-locked from a fork until the child is registered and
	// its state.json written, and write-locked while reaping: a child that
	// exits at once is reaped only after it is known, its /proc entry (the
	// start time) stays readable until then, and its exit is appended to
	// a state.json that exists.
	forkMu sync.RWMutex

	mu      sync.Mutex
	procs   map[int]*serverProc    // running leaders by PID
	ptys    map[string]*serverProc // processes whose terminal is held, by id
	clients int
	// reserved: the supervisor that started the server has not connected
	// yet; it counts as a client until it does, or fails to within a
	// bound, so the server does not find itself idle and leave before
	// the first request.
	reserved bool
	exiting  bool
	cgroups  []string // cgroups of ended leaders, removed once empty

	oom   oomFinder
	wake  chan struct{}
	work  sync.WaitGroup // terminal copiers and connection handlers
	stdin *stdinWatcher
}

// serverProc is one running command as the server sees it.
type serverProc struct {
	s      *shimServer
	id     string
	dir    string
	pid    int
	cgroup string // absolute cgroup directory, "" in pgroup+scan mode
	oom    oomCounter

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

func runShimServer(stateDir string, ready *os.File) error {
	fail := func(err error) error {
		fmt.Fprintf(ready, "%v", err)
		_ = ready.Close()
		return err
	}
	// Orphaned descendants come to the server, which reaps them; this is
	// the server's own process, never the supervisor's.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("become subreaper: %w", err))
	}
	// Stray HUP, INT or PIPE must not end the server, but commands must
	// start with default dispositions: a caught signal is reset to the
	// default on exec, an ignored one would be inherited. Signals the
	// server was started with ignored stay so, as for any child of the
	// supervisor.
	var catch []os.Signal
	for _, sig := range []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGPIPE} {
		if !signal.Ignored(sig) {
			catch = append(catch, sig)
		}
	}
	drained := make(chan os.Signal, 8)
	signal.Notify(drained, catch...)
	go func() {
		for range drained {
		}
	}()
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)

	lock, err := lockServer(stateDir)
	if err != nil {
		return fail(err)
	}
	// Held until the process ends; the kernel releases it then.
	defer runtime.KeepAlive(lock)
	addr := shimAddr(stateDir)
	if !strings.HasPrefix(addr.Name, "@") {
		// We hold the lock: a socket file left here is a dead server's.
		_ = os.Remove(addr.Name)
	}
	ln, err := net.ListenUnix("unix", addr)
	if err != nil {
		return fail(fmt.Errorf("listen on %s: %w", addr.Name, err))
	}
	s := &shimServer{
		stateDir: stateDir,
		log:      slog.New(slog.NewTextHandler(os.Stderr, nil)).With("shim_server", os.Getpid()),
		pid:      os.Getpid(),
		ln:       ln,
		procs:    make(map[int]*serverProc),
		ptys:     make(map[string]*serverProc),
		clients:  1,
		reserved: true,
		wake:     make(chan struct{}, 1),
	}
	if st, err := procstat.Read(s.pid); err == nil {
		s.start = st.StartTime
	}
	s.stdin = newStdinWatcher(s)
	_, _ = ready.WriteString("ok")
	_ = ready.Close()
	s.log.Info("started", "state_dir", stateDir, "socket", addr.Name)

	go s.accept()
	reservation := time.AfterFunc(10*time.Second, func() {
		s.mu.Lock()
		release := s.reserved
		s.reserved = false
		s.mu.Unlock()
		if release {
			s.clientGone()
		}
	})
	defer reservation.Stop()
	for {
		select {
		case <-sigchld:
		case <-s.wake:
		}
		if s.reapAndCheck() {
			break
		}
	}
	s.stdin.close()
	s.work.Wait()
	s.log.Info("exiting: no process and no client left")
	return nil
}

// lockServer takes the lock that one live server of this protocol version
// holds for its whole life, and never releases it: the kernel does when
// the process ends. A server still holding it is exiting (supervisors
// start servers one at a time, under the start lock, and only when none
// answers), so waiting for it is short; the bound turns a hang into an
// error.
func lockServer(stateDir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(stateDir, shimName(".lock")), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open server lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
		return f, nil
	}
	got := make(chan error, 1)
	go func() { got <- flockRetry(int(f.Fd()), unix.LOCK_EX) }()
	select {
	case err := <-got:
		if err != nil {
			return nil, fmt.Errorf("take server lock: %w", err)
		}
		return f, nil
	case <-time.After(10 * time.Second):
		return nil, errors.New("another shim server holds the server lock and does not exit")
	}
}

func flockRetry(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// accept serves connections until the listener is closed.
func (s *shimServer) accept() {
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			return
		}
		if uid, _, err := peerCred(c); err != nil || uid != os.Getuid() {
			s.log.Warn("refused a connection of another user", "uid", uid, "err", err)
			_ = c.Close()
			continue
		}
		s.mu.Lock()
		if s.exiting {
			s.mu.Unlock()
			_ = c.Close()
			continue
		}
		if s.reserved {
			// The starter's reservation becomes this connection.
			s.reserved = false
		} else {
			s.clients++
		}
		s.work.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

func (s *shimServer) clientGone() {
	s.mu.Lock()
	s.clients--
	s.mu.Unlock()
	s.poke()
}

func (s *shimServer) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// serve answers one supervisor's requests, one at a time, until it hangs
// up.
func (s *shimServer) serve(c *net.UnixConn) {
	defer s.work.Done()
	defer s.clientGone()
	defer c.Close()
	w := bufio.NewWriter(c)
	enc := json.NewEncoder(w)
	if err := enc.Encode(shimHello{Version: shimProtocol, PID: s.pid, StartTime: s.start}); err != nil || w.Flush() != nil {
		return
	}
	dec := json.NewDecoder(bufio.NewReader(c))
	for {
		var req shimRequest
		if err := dec.Decode(&req); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.log.Warn("bad request; hanging up", "err", err)
			}
			return
		}
		var rep shimReply
		switch req.Op {
		case "start":
			st, err := s.startProc(req.Start)
			if err != nil {
				rep.Error = err.Error()
			} else {
				rep.State = st
			}
		case "resize":
			rep.Gone, rep.Error = s.resize(req.ID, req.Size)
		default:
			rep.Error = fmt.Sprintf("unknown request %q", req.Op)
		}
		if err := enc.Encode(rep); err != nil || w.Flush() != nil {
			return
		}
	}
}

// startProc runs one command and records its state.
func (s *shimServer) startProc(cfg *shimConfig) (*shimState, error) {
	if cfg == nil || !validID(cfg.ID) {
		return nil, errors.New("start: malformed request")
	}
	// Never trust a path from a request: the directory is this id's,
	// inside our own state directory, made by the supervisor.
	dir := filepath.Join(s.stateDir, cfg.ID)
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("start: process directory %s: not a directory (%v)", dir, err)
	}
	if fileExists(filepath.Join(dir, fileState)) {
		return nil, fmt.Errorf("start: %s already ran a process", dir)
	}
	p := &serverProc{s: s, id: cfg.ID, dir: dir, stdinWD: -1}
	var closeAfter []*os.File
	defer func() {
		for _, f := range closeAfter {
			_ = f.Close()
		}
	}()
	abort := func(err error) (*shimState, error) {
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
		if p.cgroup != "" {
			_ = os.Remove(p.cgroup)
		}
		return nil, err
	}

	logf, err := os.OpenFile(filepath.Join(dir, fileLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return abort(fmt.Errorf("open log: %w", err))
	}
	var stdin *os.File // the command's stdin (pipes mode)
	if cfg.Stdin {
		fifo := filepath.Join(dir, fileStdin)
		if err := unix.Mkfifo(fifo, 0o600); err != nil {
			_ = logf.Close()
			return abort(fmt.Errorf("create stdin fifo: %w", err))
		}
		// Open the read end without waiting for a writer, then hold a
		// write end ourselves: the reader sees EOF only when we let go.
		rfd, err := unix.Open(fifo, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			_ = logf.Close()
			return abort(fmt.Errorf("open stdin fifo: %w", err))
		}
		wfd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			_ = unix.Close(rfd)
			_ = logf.Close()
			return abort(fmt.Errorf("open stdin fifo for writing: %w", err))
		}
		p.stdinKeep = os.NewFile(uintptr(wfd), fifo)
		if cfg.PTY != nil {
			// The server forwards what arrives into the terminal; the read
			// end stays non-blocking, in Go's poller.
			p.stdinR = os.NewFile(uintptr(rfd), fifo)
		} else {
			if err := unix.SetNonblock(rfd, false); err != nil {
				_ = unix.Close(rfd)
				_ = logf.Close()
				return abort(err)
			}
			stdin = os.NewFile(uintptr(rfd), fifo)
			closeAfter = append(closeAfter, stdin)
		}
	} else if cfg.PTY == nil {
		if stdin, err = os.Open(os.DevNull); err != nil {
			_ = logf.Close()
			return abort(err)
		}
		closeAfter = append(closeAfter, stdin)
	}

	sys := &syscall.SysProcAttr{Setsid: true}
	var files []uintptr
	if cfg.PTY != nil {
		master, slave, err := openPTY(*cfg.PTY)
		if err != nil {
			_ = logf.Close()
			return abort(fmt.Errorf("open pty: %w", err))
		}
		closeAfter = append(closeAfter, slave)
		p.master, p.logFile = master, logf
		p.exitWS = make(chan unix.WaitStatus, 1)
		files = []uintptr{slave.Fd(), slave.Fd(), slave.Fd()}
		sys.Setctty, sys.Ctty = true, 0
	} else {
		closeAfter = append(closeAfter, logf)
		files = []uintptr{stdin.Fd(), logf.Fd(), logf.Fd()}
	}
	environ := dropVars(cfg.Env, func(name string) bool { return name == shimEnvVar })
	if cfg.CgroupBase != "" {
		p.cgroup = filepath.Join(cfg.CgroupBase, cfg.ID)
		if err := os.Mkdir(p.cgroup, 0o755); err != nil {
			p.cgroup = ""
			return abort(fmt.Errorf("create cgroup: %w", err))
		}
		fd, err := unix.Open(p.cgroup, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return abort(fmt.Errorf("open cgroup: %w", err))
		}
		defer unix.Close(fd)
		sys.UseCgroupFD, sys.CgroupFD = true, fd
	} else {
		if !strings.HasPrefix(cfg.Tag, treeTagPrefix) || cfg.Tag != treeTagPrefix+cfg.ID {
			return abort(fmt.Errorf("start: tree tag %q is not %s%s", cfg.Tag, treeTagPrefix, cfg.ID))
		}
		environ = append(environ, cfg.Tag+"=1")
	}

	// Counted before the fork: an OOM kill before it is not this one's.
	p.oom = s.oom.counter(p.cgroup)
	s.forkMu.RLock()
	pid, err := forkExecUnmasked("/bin/sh", []string{"/bin/sh", "-c", cfg.Command}, &syscall.ProcAttr{
		Dir: cfg.Dir, Env: environ, Files: files, Sys: sys,
	})
	if err != nil {
		s.forkMu.RUnlock()
		return abort(fmt.Errorf("start /bin/sh: %w", err))
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
	// The exit is appended to state.json: the reaper must not record it
	// before the file exists, so the read lock is held until then.
	defer s.forkMu.RUnlock()

	st := &shimState{PID: pid, StartTime: startTime, Tag: cfg.Tag, ShimPID: s.pid, ShimStart: s.start,
		Stdin: cfg.Stdin, PTY: cfg.PTY != nil, SpecTag: cfg.SpecTag, CommandLine: cfg.Command, Server: shimProtocol}
	if p.cgroup != "" {
		st.Cgroup = filepath.Join(cfg.CgroupRel, cfg.ID)
	}
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
	if err := writeJSONAtomic(filepath.Join(dir, fileState), st); err != nil {
		// The command runs; without its state nobody can attach. Kill it
		// rather than leave an unmanageable process behind; the reaper
		// records its end.
		_ = unix.Kill(-pid, unix.SIGKILL)
		return nil, fmt.Errorf("record state: %w", err)
	}
	return st, nil
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
	if p.cgroup != "" {
		p.s.mu.Lock()
		p.s.cgroups = append(p.s.cgroups, p.cgroup)
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
}

// closeStdin lets go of the server's write end of the stdin FIFO.
func (p *serverProc) closeStdin() {
	p.stdinOnce.Do(func() {
		if p.stdinKeep != nil {
			_ = p.stdinKeep.Close()
		}
	})
}

// copyTerminal copies the terminal's output into the log until no one
// holds the terminal any more, and records the exit once the leader ended
// and what it wrote is in the log.
func (p *serverProc) copyTerminal() {
	defer p.s.work.Done()
	buf := make([]byte, 128<<10)
	recorded := false
	for {
		n, err := p.master.Read(buf)
		if n > 0 {
			if _, werr := p.logFile.Write(buf[:n]); werr != nil {
				p.diag("write log: %v", werr)
			}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && !recorded {
			// The leader ended. Reading a pty master with nothing buffered
			// first flushes the kernel's pending input, so reading until
			// EAGAIN gets everything the leader wrote.
			_ = p.master.SetReadDeadline(time.Time{})
			p.drainTerminal(buf)
			p.recordExit(<-p.exitWS)
			recorded = true
			continue
		}
		if err != nil {
			// EIO: every holder of the terminal closed it; that is EOF.
			break
		}
	}
	if !recorded {
		p.recordExit(<-p.exitWS)
	}
	p.s.mu.Lock()
	delete(p.s.ptys, p.id)
	p.s.mu.Unlock()
	p.ptyMu.Lock()
	_ = p.master.Close()
	p.master = nil
	p.ptyMu.Unlock()
	if p.stdinR != nil {
		// Ends forwardStdin.
		_ = p.stdinR.Close()
	}
	_ = p.logFile.Close()
}

func (p *serverProc) drainTerminal(buf []byte) {
	rc, err := p.master.SyscallConn()
	if err != nil {
		return
	}
	for {
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, rerr = unix.Read(int(fd), buf)
			return true
		}); err != nil {
			return
		}
		if n <= 0 || rerr != nil {
			return
		}
		if _, err := p.logFile.Write(buf[:n]); err != nil {
			p.diag("write log: %v", err)
		}
	}
}

// forwardStdin copies what supervisors write into the stdin FIFO into the
// terminal. Once every writer let go (CloseStdin), it types the terminal's
// EOF character: a terminal has no half-close.
func (p *serverProc) forwardStdin() {
	defer p.s.work.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := p.stdinR.Read(buf)
		if n > 0 {
			if !p.toTerminal(buf[:n]) {
				return
			}
		}
		if errors.Is(err, io.EOF) {
			p.toTerminal([]byte{4})
			return
		}
		if err != nil {
			return
		}
	}
}

func (p *serverProc) toTerminal(b []byte) bool {
	p.ptyMu.Lock()
	m := p.master
	p.ptyMu.Unlock()
	if m == nil {
		return false
	}
	_, err := m.Write(b)
	return err == nil
}

// resize sets the window size of a process's terminal. gone reports that
// the server holds no terminal of that id (the process ended, or another
// server runs it).
func (s *shimServer) resize(id string, size *env.WindowSize) (gone bool, errMsg string) {
	if size == nil {
		return false, "resize: no size"
	}
	s.mu.Lock()
	p := s.ptys[id]
	s.mu.Unlock()
	if p == nil {
		return true, ""
	}
	p.ptyMu.Lock()
	defer p.ptyMu.Unlock()
	if p.master == nil {
		return true, ""
	}
	if err := resizePTY(p.master, *size); err != nil {
		return false, err.Error()
	}
	return false, ""
}

// stdinWatcher notices stdin.closed markers in process directories with
// one inotify instance for the whole server.
type stdinWatcher struct {
	s   *shimServer
	f   *os.File // nil: inotify unavailable, markers are polled
	mu  sync.Mutex
	wds map[int]*serverProc
	// polled are processes watched by polling where inotify failed.
	polled map[*serverProc]struct{}
	done   chan struct{}
	wg     sync.WaitGroup
}

func newStdinWatcher(s *shimServer) *stdinWatcher {
	w := &stdinWatcher{s: s, wds: make(map[int]*serverProc), polled: make(map[*serverProc]struct{}), done: make(chan struct{})}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err == nil {
		w.f = os.NewFile(uintptr(fd), "inotify")
		w.wg.Add(1)
		go w.run()
	}
	w.wg.Add(1)
	go w.poll()
	return w
}

func (w *stdinWatcher) watch(p *serverProc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p.over {
		return
	}
	if w.f != nil {
		if wd, err := unix.InotifyAddWatch(int(w.f.Fd()), p.dir, unix.IN_CREATE|unix.IN_MOVED_TO); err == nil {
			p.stdinWD = wd
			w.wds[wd] = p
			// A marker made before the watch existed.
			if fileExists(filepath.Join(p.dir, fileStdinClosed)) {
				go p.closeStdin()
			}
			return
		}
	}
	w.polled[p] = struct{}{}
}

func (w *stdinWatcher) unwatch(p *serverProc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p.over = true
	delete(w.polled, p)
	if p.stdinWD >= 0 {
		delete(w.wds, p.stdinWD)
		if w.f != nil {
			_, _ = unix.InotifyRmWatch(int(w.f.Fd()), uint32(p.stdinWD))
		}
		p.stdinWD = -1
	}
}

func (w *stdinWatcher) run() {
	defer w.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameEnd := off + unix.SizeofInotifyEvent + int(ev.Len)
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:min(nameEnd, n)]), "\x00")
			off = nameEnd
			if name != fileStdinClosed {
				continue
			}
			w.mu.Lock()
			p := w.wds[int(ev.Wd)]
			w.mu.Unlock()
			if p != nil {
				p.closeStdin()
			}
		}
	}
}

// poll is the fallback where inotify is unavailable or a watch could not
// be added: it looks for markers every 200 ms while there are such
// processes.
func (w *stdinWatcher) poll() {
	defer w.wg.Done()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
		}
		w.mu.Lock()
		var closed []*serverProc
		for p := range w.polled {
			if fileExists(filepath.Join(p.dir, fileStdinClosed)) || !dirExists(p.dir) {
				closed = append(closed, p)
				delete(w.polled, p)
			}
		}
		w.mu.Unlock()
		for _, p := range closed {
			p.closeStdin()
		}
	}
}

func (w *stdinWatcher) close() {
	close(w.done)
	if w.f != nil {
		_ = w.f.Close()
	}
	w.wg.Wait()
}

func dirExists(dir string) bool {
	_, err := os.Stat(dir)
	return err == nil
}

func appendExit(path string, status env.ExitStatus) error {
	data, err := json.Marshal(status)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(append(data, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeJSONAtomic writes v to path via a temporary file and a rename, so
// a reader sees the whole file or none. No fsync: these files describe
// processes, which a machine crash ends anyway; what matters is that no
// reader ever sees half a file.
func writeJSONAtomic(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	// A line: the exit status may follow it (see recordExit).
	data = append(data, '\n')
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}
