package envtest_test

// execEnv is a deliberately small Environment on os/exec, used only to test
// the suite itself (that its cases pass on a straightforward correct
// backend and that its helpers work). It has no PTY, no re-attach and
// kills by process group only, so the suite's skips are exercised too.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
	"golang.org/x/sys/unix"
)

type execEnv struct {
	shell   string   // runs Spec.Command as shell -c; "" means /bin/sh
	environ []string // base environment; nil means os.Environ()

	mu     sync.Mutex
	closed bool
	procs  map[*execProc]bool
}

func newExecEnv() *execEnv { return &execEnv{procs: map[*execProc]bool{}} }

func (e *execEnv) Name() string { return "exec-test" }

func (e *execEnv) Capabilities() env.Capabilities {
	return env.Capabilities{Stdin: true, ReplayOutput: true, TreeKill: "pgroup"}
}

func (e *execEnv) Start(ctx context.Context, spec env.Spec) (env.Process, error) {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("exec: start: %w", env.ErrReleased)
	}
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("exec: start: %w", err)
	}
	if spec.Limits != nil {
		if err := env.CheckLimits(e.Name(), e.Capabilities(), *spec.Limits); err != nil {
			return nil, fmt.Errorf("exec: start: %w", err)
		}
	}
	if spec.PTY != nil || spec.Detach {
		return nil, fmt.Errorf("exec: start: PTY/Detach: %w", env.ErrUnsupported)
	}
	if spec.Dir != "" {
		if fi, err := os.Stat(spec.Dir); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("exec: start: %w", &env.SpecError{Field: "Dir", Value: spec.Dir, Reason: "not a directory", Err: env.ErrDirNotFound})
		}
	}
	shell, environ := e.shell, e.environ
	if shell == "" {
		shell = "/bin/sh"
	}
	if environ == nil {
		environ = os.Environ()
	}
	command := spec.Command
	var mem *os.File
	if len(command) > env.InlineCommandMax {
		// As env/local does (env.InlineCommandMax): from a memory file on
		// descriptor 3, which its first line closes; no temporary file
		// (a full or missing TMPDIR) can fail it.
		fd, err := unix.MemfdCreate("envtest-command", unix.MFD_CLOEXEC)
		if err != nil {
			return nil, fmt.Errorf("exec: start: %w", err)
		}
		mem = os.NewFile(uintptr(fd), "envtest-command")
		if _, err := mem.WriteString("exec 3<&-\n" + command); err != nil {
			mem.Close()
			return nil, fmt.Errorf("exec: start: %w", err)
		}
		defer mem.Close()
		command = ". /dev/fd/3"
	}
	cmd := exec.Command(shell, "-c", command)
	if mem != nil {
		cmd.ExtraFiles = []*os.File{mem}
	}
	cmd.Dir = spec.Dir
	cmd.Env = append(slices.Clone(environ), spec.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = w, w
	p := &execProc{env: e, cmd: cmd, out: r, changed: make(chan struct{}), done: make(chan struct{}), outDone: make(chan struct{})}
	if spec.Stdin {
		if p.stdin, err = cmd.StdinPipe(); err != nil {
			return nil, err
		}
	}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("exec: start: %w", err)
	}
	w.Close()
	p.pgid = cmd.Process.Pid
	go p.readLoop()
	go p.waitLoop()
	e.mu.Lock()
	e.procs[p] = true
	e.mu.Unlock()
	return p, nil
}

func (e *execEnv) Attach(ctx context.Context, ref env.Ref) (env.Process, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, env.ErrReleased
	}
	return nil, env.ErrUnsupported
}

func (e *execEnv) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	procs := e.procs
	e.mu.Unlock()
	for p := range procs {
		p.mu.Lock()
		if !p.exited {
			syscall.Kill(-p.pgid, syscall.SIGKILL)
		}
		p.mu.Unlock()
		<-p.done
		<-p.outDone
	}
	return nil
}

type execProc struct {
	env   *execEnv
	cmd   *exec.Cmd
	pgid  int
	out   *os.File
	stdin io.WriteCloser

	mu          sync.Mutex
	buf         []byte
	outEnded    bool
	changed     chan struct{}
	status      env.ExitStatus
	exited      bool
	released    bool
	stdinClosed bool

	done    chan struct{}
	outDone chan struct{}
}

func (p *execProc) readLoop() {
	defer close(p.outDone)
	b := make([]byte, 64<<10)
	for {
		n, err := p.out.Read(b)
		p.mu.Lock()
		p.buf = append(p.buf, b[:n]...)
		if err != nil {
			p.outEnded = true
		}
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
		if err != nil {
			p.out.Close()
			return
		}
	}
}

func (p *execProc) waitLoop() {
	err := p.cmd.Wait()
	st := env.Exited(0)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		ws := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			st = env.Signaled(env.SignalFromNumber(int(ws.Signal())))
		} else {
			st = env.Exited(ws.ExitStatus())
		}
	}
	p.mu.Lock()
	p.status, p.exited = st, true
	p.mu.Unlock()
	close(p.done)
	// A grandchild may hold the pipe: stop reading after a grace.
	p.out.SetReadDeadline(time.Now().Add(2 * time.Second))
}

func (p *execProc) check() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released {
		return env.ErrReleased
	}
	return nil
}

func (p *execProc) PID() int { return p.pgid }

func (p *execProc) Output(ctx context.Context, offset int64) (io.ReadCloser, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	return &execReader{p: p, off: offset, closed: make(chan struct{})}, nil
}

type execReader struct {
	p         *execProc
	off       int64
	closeOnce sync.Once
	closed    chan struct{}
}

func (r *execReader) Read(b []byte) (int, error) {
	for {
		r.p.mu.Lock()
		buf, ended, ch := r.p.buf, r.p.outEnded, r.p.changed
		r.p.mu.Unlock()
		if r.off < int64(len(buf)) {
			n := copy(b, buf[r.off:])
			r.off += int64(n)
			return n, nil
		}
		if ended {
			return 0, io.EOF
		}
		select {
		case <-ch:
		case <-r.closed:
			return 0, os.ErrClosed
		}
	}
}

func (r *execReader) Close() error {
	r.closeOnce.Do(func() { close(r.closed) })
	return nil
}

func (p *execProc) Write(ctx context.Context, b []byte) (int, error) {
	if err := p.check(); err != nil {
		return 0, err
	}
	p.mu.Lock()
	exited, closed := p.exited, p.stdinClosed || p.stdin == nil
	p.mu.Unlock()
	if exited {
		return 0, env.ErrExited
	}
	if closed {
		return 0, env.ErrStdinClosed
	}
	return p.stdin.Write(b)
}

func (p *execProc) CloseStdin(ctx context.Context) error {
	if err := p.check(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stdin != nil && !p.stdinClosed {
		p.stdinClosed = true
		return p.stdin.Close()
	}
	return nil
}

func (p *execProc) Signal(ctx context.Context, sig env.Signal) error {
	if err := p.check(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	err := syscall.Kill(-p.pgid, syscall.Signal(sig.Number()))
	if p.exited {
		// What the leader left in its group still gets the signal. (A
		// real backend must make sure the group's number was not reused;
		// this test backend does not run long enough for that.)
		return env.ErrExited
	}
	if errors.Is(err, syscall.ESRCH) {
		// Only a zombie is left: the exit is not reaped yet.
		return env.ErrExited
	}
	if err != nil {
		return fmt.Errorf("exec: kill: %w", err)
	}
	return nil
}

func (p *execProc) Survivors(ctx context.Context) ([]int, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	if err := syscall.Kill(-p.pgid, 0); err == nil {
		return []int{p.pgid}, nil
	}
	return nil, nil
}

func (p *execProc) Wait(ctx context.Context) (env.ExitStatus, error) {
	if err := p.check(); err != nil {
		return env.NoStatus, err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return env.NoStatus, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status, nil
}

func (p *execProc) Resize(ctx context.Context, size env.WindowSize) error {
	if err := p.check(); err != nil {
		return err
	}
	return env.ErrUnsupported
}

func (p *execProc) Ref() (env.Ref, error) {
	if err := p.check(); err != nil {
		return env.Ref{}, err
	}
	return env.Ref{}, env.ErrUnsupported
}

func (p *execProc) Release() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.released = true
	return nil
}

func (p *execProc) Remove(ctx context.Context) error {
	if err := p.check(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.exited {
		return errors.New("exec: remove: process is running")
	}
	p.released = true
	return nil
}

func TestSuiteOnExecEnv(t *testing.T) {
	envtest.Run(t, envtest.Config{
		// Whatever the harness that runs the tests ignores (CI ignores
		// signal 32, which Go leaves as it found it) a plain sh -c has too.
		SignalBaseline: envtest.LocalSignalBaseline,
		New:            func(t *testing.T) env.Environment { return newExecEnv() },
		PTY:            true,
	})
}

// TestSuiteOnBusybox runs the suite's scripts under busybox alone: sh is
// busybox ash and PATH holds nothing but busybox applets, as in a busybox
// container. It proves the suite needs nothing beyond what busybox has.
func TestSuiteOnBusybox(t *testing.T) {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("busybox is not installed (apt-get install busybox)")
	}
	list, err := exec.Command(bb, "--list").Output()
	require.NoError(t, err, "busybox --list")
	bin := t.TempDir()
	for _, applet := range strings.Fields(string(list)) {
		require.NoError(t, os.Symlink(bb, filepath.Join(bin, applet)))
	}
	// Debian's busybox build lacks the nohup applet that upstream's
	// default configuration (and the busybox image) has.
	if _, err := os.Stat(filepath.Join(bin, "nohup")); err != nil {
		if nohup, err := exec.LookPath("nohup"); err == nil {
			os.Symlink(nohup, filepath.Join(bin, "nohup"))
		}
	}
	environ := []string{"PATH=" + bin, "HOME=/", "TMPDIR=" + os.TempDir()}
	envtest.Run(t, envtest.Config{
		// Whatever the harness that runs the tests ignores (CI ignores
		// signal 32, which Go leaves as it found it) a plain sh -c has too.
		SignalBaseline: envtest.LocalSignalBaseline,
		New: func(t *testing.T) env.Environment {
			e := newExecEnv()
			e.shell, e.environ = filepath.Join(bin, "sh"), environ
			return e
		},
	})
}
