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

	"github.com/corralhq/corral/internal/procstat"
	"golang.org/x/sys/unix"
)

// readyFD is the descriptor on which a starting shim server reports "ok"
// (or the reason it failed) to the supervisor that started it.
const readyFD = 3

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
	// cgroupRetry: a look at cgroups not removed yet is scheduled.
	cgroupRetry bool

	oom   oomFinder
	wake  chan struct{}
	work  sync.WaitGroup // terminal copiers and connection handlers
	stdin *stdinWatcher
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
