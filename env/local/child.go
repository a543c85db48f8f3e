package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corralhq/corral/env"
)

// tree is the platform's way to signal and inspect a whole process tree.
type tree interface {
	// prepare sets up cmd (SysProcAttr, tag variable) before it starts.
	prepare(cmd *exec.Cmd) error
	// started is called once the leader runs; abort instead if it failed.
	started(p *os.Process) error
	abort()
	// signal delivers sig to the tree. leaderLive says the leader is known
	// to be unreaped and ours, so its PID (and process group) is safe to
	// use as a number.
	signal(sig syscall.Signal, leaderLive bool) error
	// survivors lists live (non-zombie) members of the tree.
	survivors(leaderLive bool) ([]int, error)
	// cleanup releases what the tree holds once it is empty; it reports
	// false while members remain.
	cleanup() bool
	// release drops handles without touching processes.
	release()
}

// statusTree is a tree that knows how its leader ended better than the
// exit code does: a Windows job that corral terminated gives every member
// one exit code, which alone would read as a plain exit.
type statusTree interface {
	exitStatus(ps *os.ProcessState) env.ExitStatus
}

// child is a process started without Detach: the supervisor's own child.
type child struct {
	env  *Env
	pid  int
	cmd  *exec.Cmd
	tree tree
	out  *outPump
	in   *stdinWriter
	pty  *os.File // master; nil for pipes
	oom  oomCounter
	// input names the terminal or stdin pipe a read of which is a wait
	// for input (InputWaits).
	input      inputTarget
	inputCache inputCache
	// limits are the cgroups of the process's env.Limits, removed with
	// its tree.
	limits *limitGroups

	// mu orders signals against reaping: Signal holds it shared while it
	// uses the leader's PID; the waiter takes it exclusively to mark the
	// leader exited before it reaps, so the PID cannot be reused under a
	// signal.
	mu      sync.RWMutex
	exiting bool

	done     chan struct{} // closed once status is set
	status   env.ExitStatus
	waitErr  error
	finished chan struct{} // closed once the output pump has ended too

	released   atomic.Bool
	outputOnce atomic.Bool
}

func (e *Env) startChild(spec env.Spec) (*child, error) {
	id := newID()
	cmd := exec.Command(shellPath(), "-c", spec.Command)
	cmd.Dir = spec.Dir
	cmd.Env = e.commandEnv(spec)
	// A long command reaches the shell on a memory file, not in argv.
	mem, err := memCommand(spec.Command)
	if err != nil {
		return nil, fmt.Errorf("local: start: %w", err)
	}
	t, err := e.sys.newTree(id)
	if err != nil {
		if mem != nil {
			mem.Close()
		}
		return nil, fmt.Errorf("local: start: %w", err)
	}
	c := &child{env: e, cmd: cmd, tree: t, done: make(chan struct{}), finished: make(chan struct{})}

	var closeAfterStart []*os.File
	closeAll := func(files []*os.File) {
		for _, f := range files {
			_ = f.Close()
		}
	}
	if mem != nil {
		cmd.Args[2] = memCommandArg
		cmd.ExtraFiles = []*os.File{mem}
		closeAfterStart = append(closeAfterStart, mem)
	}
	var outRead *os.File
	if spec.PTY != nil {
		master, slave, err := openPTY(*spec.PTY)
		if err != nil {
			closeAll(closeAfterStart)
			return nil, fmt.Errorf("local: start: pty: %w", err)
		}
		c.pty, outRead = master, master
		c.input = ptyTarget(slave)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		closeAfterStart = append(closeAfterStart, slave)
		c.in = newStdinWriter(master, spec.Stdin, true)
	} else {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(closeAfterStart)
			return nil, fmt.Errorf("local: start: output pipe: %w", err)
		}
		outRead = r
		// One file for both: stdout and stderr share the descriptor, so
		// their order is exactly the order of the writes.
		cmd.Stdout, cmd.Stderr = w, w
		closeAfterStart = append(closeAfterStart, w)
		if spec.Stdin {
			sr, sw, err := os.Pipe()
			if err != nil {
				closeAll(append(closeAfterStart, r))
				return nil, fmt.Errorf("local: start: stdin pipe: %w", err)
			}
			cmd.Stdin = sr
			c.input = pipeTarget(sr)
			closeAfterStart = append(closeAfterStart, sr)
			c.in = newStdinWriter(sw, true, false)
		} else {
			c.in = newStdinWriter(nil, false, false)
		}
	}
	if err := t.prepare(cmd); err != nil {
		closeAll(closeAfterStart)
		_ = outRead.Close()
		c.in.closeFile()
		return nil, fmt.Errorf("local: start: %w", err)
	}
	if spec.PTY != nil {
		setPTYAttrs(cmd)
	}
	lg, err := e.sys.newLimitGroups(id, treeCgroupDir(t), spec.Limits)
	if err != nil {
		t.abort()
		closeAll(closeAfterStart)
		_ = outRead.Close()
		c.in.closeFile()
		return nil, fmt.Errorf("local: start: %w", err)
	}
	c.limits = lg
	// Counted before the fork: an OOM kill before it is not this one's.
	c.oom = lg.oomCounter(e.oom.counter(treeCgroupDir(t)))
	if err := lg.fork(cmd.Start); err != nil {
		lg.remove()
		t.abort()
		closeAll(closeAfterStart)
		_ = outRead.Close()
		c.in.closeFile()
		return nil, fmt.Errorf("local: start: %w", shellHint(err))
	}
	closeAll(closeAfterStart)
	c.pid = cmd.Process.Pid
	if err := t.started(cmd.Process); err != nil {
		// A tree that cannot hold the process must not let it run: on
		// Windows it is still suspended, outside its job.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.abort()
		_ = outRead.Close()
		c.in.closeFile()
		return nil, fmt.Errorf("local: start: %w", err)
	}
	c.out = newOutPump(outRead, spec.PTY != nil)

	e.mu.Lock()
	if e.closed {
		// Close raced with this Start: do not leave an orphan behind.
		e.mu.Unlock()
		_ = t.signal(syscall.SIGKILL, true)
	} else {
		e.children[c] = struct{}{}
		e.mu.Unlock()
	}
	go c.out.run()
	go c.wait()
	e.log.Debug("started", "pid", c.pid, "tag", spec.Tag, "pty", spec.PTY != nil)
	return c, nil
}

func (c *child) wait() {
	// Observe the exit without reaping, then fence signals off, then reap.
	waitNoReap(c.cmd.Process)
	c.mu.Lock()
	c.exiting = true
	c.mu.Unlock()
	err := c.cmd.Wait()
	var exitErr *exec.ExitError
	switch {
	case err == nil, errors.As(err, &exitErr):
		st := exitStatusOf(c.cmd.ProcessState)
		if k, ok := c.tree.(statusTree); ok {
			st = k.exitStatus(c.cmd.ProcessState)
		}
		c.status = c.oom.mark(st)
	default:
		c.status = env.NoStatus
		c.waitErr = fmt.Errorf("local: wait for %d: %w", c.pid, err)
	}
	// Stdin refuses writes before Wait returns: a caller that saw the
	// exit must get ErrExited, and a terminal's master, which stays open
	// for the output, would otherwise take the bytes.
	c.in.processExited()
	// The cgroup's cpu.stat that InputWaits holds goes before Wait returns.
	c.inputCache.close()
	close(c.done)
	c.out.processExited()
	<-c.out.ended
	// The pty master is closed only now, after Wait, so the terminal stays
	// valid for the whole life of the leader.
	c.out.closeFile()
	close(c.finished)
	if c.released.Load() {
		c.env.forget(c)
	}
	c.cleanupTree()
}

// cleanupTree removes the tree's kernel objects once it is empty; members
// that outlive the leader are retried briefly, then left to Close/Release.
func (c *child) cleanupTree() {
	// The limit cgroups go too; one still populated stays for
	// sweepStaleCgroups.
	defer c.limits.remove()
	for delay := 50 * time.Millisecond; delay < 2*time.Second; delay *= 2 {
		if c.tree.cleanup() {
			return
		}
		if c.released.Load() {
			return
		}
		time.Sleep(delay)
	}
}

func (c *child) PID() int { return c.pid }

func (c *child) Output(ctx context.Context, offset int64) (io.ReadCloser, error) {
	if c.released.Load() {
		return nil, fmt.Errorf("local: output of %d: %w", c.pid, env.ErrReleased)
	}
	if offset < 0 {
		return nil, fmt.Errorf("local: output of %d: negative offset %d", c.pid, offset)
	}
	if !c.outputOnce.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("local: output of %d: the live stream was already opened (ReplayOutput is false for non-detached processes): %w", c.pid, env.ErrUnsupported)
	}
	return c.out.open(ctx, offset), nil
}

func (c *child) Write(ctx context.Context, p []byte) (int, error) {
	if c.released.Load() {
		return 0, fmt.Errorf("local: write to %d: %w", c.pid, env.ErrReleased)
	}
	n, err := c.in.write(ctx, p)
	if err != nil {
		return n, fmt.Errorf("local: write to %d: %w", c.pid, err)
	}
	return n, nil
}

func (c *child) CloseStdin(ctx context.Context) error {
	if c.released.Load() {
		return fmt.Errorf("local: close stdin of %d: %w", c.pid, env.ErrReleased)
	}
	if err := c.in.close(ctx); err != nil {
		return fmt.Errorf("local: close stdin of %d: %w", c.pid, err)
	}
	return nil
}

func (c *child) Signal(ctx context.Context, sig env.Signal) error {
	if c.released.Load() {
		return fmt.Errorf("local: signal %d: %w", c.pid, env.ErrReleased)
	}
	num, err := sysSignal(sig)
	if err != nil {
		return fmt.Errorf("local: signal %d: %w", c.pid, err)
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.exiting {
		// Descendants that outlived the leader still get the signal, so a
		// caller cleaning up after an exit reaches them.
		_ = c.tree.signal(num, false)
		return fmt.Errorf("local: signal %s to %d: %w", sig, c.pid, env.ErrExited)
	}
	if err := c.tree.signal(num, true); err != nil {
		return fmt.Errorf("local: signal %s to %d: %w", sig, c.pid, err)
	}
	return nil
}

// kill ends the whole tree; used by Env.Close.
func (c *child) kill() error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if err := c.tree.signal(syscall.SIGKILL, !c.exiting); err != nil {
		return fmt.Errorf("local: close: kill %d: %w", c.pid, err)
	}
	return nil
}

// awaitEmpty polls until the tree has no live member, or until stop.
func (c *child) awaitEmpty(stop <-chan time.Time) error {
	for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		c.mu.RLock()
		pids, err := c.tree.survivors(!c.exiting)
		if err == nil && len(pids) > 0 {
			err = c.tree.signal(syscall.SIGKILL, !c.exiting)
		}
		c.mu.RUnlock()
		if err == nil && len(pids) == 0 {
			return nil
		}
		select {
		case <-stop:
			return fmt.Errorf("local: close: processes %v of %d survived SIGKILL (%v)", pids, c.pid, err)
		case <-time.After(delay):
		}
	}
}

func (c *child) Survivors(ctx context.Context) ([]int, error) {
	if c.released.Load() {
		return nil, fmt.Errorf("local: survivors of %d: %w", c.pid, env.ErrReleased)
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	pids, err := c.tree.survivors(!c.exiting)
	if err != nil {
		return nil, fmt.Errorf("local: survivors of %d: %w", c.pid, err)
	}
	return pids, nil
}

func (c *child) Wait(ctx context.Context) (env.ExitStatus, error) {
	if c.released.Load() {
		return env.NoStatus, fmt.Errorf("local: wait for %d: %w", c.pid, env.ErrReleased)
	}
	select {
	case <-c.done:
		return c.status, c.waitErr
	case <-ctx.Done():
		return env.NoStatus, ctx.Err()
	}
}

func (c *child) Resize(ctx context.Context, size env.WindowSize) error {
	if c.released.Load() {
		return fmt.Errorf("local: resize %d: %w", c.pid, env.ErrReleased)
	}
	if c.pty == nil {
		return fmt.Errorf("local: resize %d: no PTY: %w", c.pid, env.ErrUnsupported)
	}
	if size.Rows == 0 || size.Cols == 0 {
		return fmt.Errorf("local: resize %d: %w", c.pid, &env.SpecError{Field: "PTY", Value: fmt.Sprintf("%dx%d", size.Rows, size.Cols), Reason: "rows and columns must both be at least 1"})
	}
	select {
	case <-c.finished:
		return fmt.Errorf("local: resize %d: %w", c.pid, env.ErrExited)
	default:
	}
	if err := resizePTY(c.pty, size); err != nil {
		if errors.Is(err, os.ErrClosed) {
			return fmt.Errorf("local: resize %d: %w", c.pid, env.ErrExited)
		}
		return fmt.Errorf("local: resize %d: %w", c.pid, err)
	}
	return nil
}

func (c *child) Ref() (env.Ref, error) {
	if c.released.Load() {
		return env.Ref{}, fmt.Errorf("local: ref of %d: %w", c.pid, env.ErrReleased)
	}
	return env.Ref{}, fmt.Errorf("local: ref of %d: started without Detach: %w", c.pid, env.ErrUnsupported)
}

// Release drops the handle. The process keeps running; a goroutine stays
// to reap it (a zombie would otherwise remain until the supervisor exits),
// its output is discarded, and Env.Close still kills it.
func (c *child) Release() error {
	if !c.released.CompareAndSwap(false, true) {
		return nil
	}
	c.out.discard()
	c.in.closeFile()
	c.inputCache.close()
	// A released process that still runs stays known to the Env until it
	// ends: nobody else can stop it, so Env.Close must.
	select {
	case <-c.finished:
		c.env.forget(c)
	default:
	}
	go func() {
		<-c.finished
		c.tree.cleanup()
		c.limits.remove()
		c.tree.release()
	}()
	return nil
}

func (c *child) Remove(ctx context.Context) error {
	if c.released.Load() {
		return fmt.Errorf("local: remove %d: %w", c.pid, env.ErrReleased)
	}
	select {
	case <-c.done:
	default:
		return fmt.Errorf("local: remove %d: process is still running; kill it first", c.pid)
	}
	return c.Release()
}

// stdinWriter is the supervisor's end of a process's stdin: a pipe, or the
// PTY master (where closing means sending the terminal's EOF character).
type stdinWriter struct {
	enabled bool
	pty     bool

	writeMu sync.Mutex // serialises writes (and their deadlines)

	mu     sync.Mutex
	f      *os.File
	closed bool
	exited bool
}

func newStdinWriter(f *os.File, enabled, pty bool) *stdinWriter {
	return &stdinWriter{f: f, enabled: enabled, pty: pty}
}

func (s *stdinWriter) write(ctx context.Context, p []byte) (int, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	switch {
	case !s.enabled:
		s.mu.Unlock()
		return 0, fmt.Errorf("spec did not ask for stdin: %w", env.ErrStdinClosed)
	case s.exited:
		s.mu.Unlock()
		return 0, env.ErrExited
	case s.closed:
		s.mu.Unlock()
		return 0, env.ErrStdinClosed
	}
	f := s.f
	s.mu.Unlock()
	n, err := writeCtx(ctx, f, p)
	if err != nil {
		s.mu.Lock()
		exited, closed := s.exited, s.closed
		s.mu.Unlock()
		switch {
		case exited || errors.Is(err, syscall.EPIPE):
			return n, env.ErrExited
		case closed:
			return n, env.ErrStdinClosed
		case ctx.Err() != nil:
			return n, ctx.Err()
		}
		return n, err
	}
	return n, nil
}

// writeCtx writes p to f, giving up when ctx is done. Callers serialise
// writes to one file: the deadline is per file, not per call.
func writeCtx(ctx context.Context, f *os.File, p []byte) (int, error) {
	if d, ok := ctx.Deadline(); ok {
		_ = f.SetWriteDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Now()) })
	defer func() {
		stop()
		_ = f.SetWriteDeadline(time.Time{})
	}()
	return f.Write(p)
}

func (s *stdinWriter) close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.enabled || s.closed || s.exited {
		s.closed = true
		return nil
	}
	s.closed = true
	if s.pty {
		// A terminal has no half-close: VEOF at the start of a line makes
		// the reader's read return 0, which is what EOF means there.
		_ = s.f.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := s.f.Write([]byte{4}); err != nil && !errors.Is(err, os.ErrClosed) {
			return err
		}
		return nil
	}
	return s.f.Close()
}

// processExited fails pending and future writes with ErrExited.
func (s *stdinWriter) processExited() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exited = true
	// Closing fails a pending write at once. A PTY master stays: it is the
	// output too, and is closed after the output is drained.
	if s.f != nil && !s.pty && !s.closed {
		_ = s.f.Close()
	}
}

func (s *stdinWriter) closeFile() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil && !s.pty && !s.closed && !s.exited {
		_ = s.f.Close()
	}
	s.closed = true
}
