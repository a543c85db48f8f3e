package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/corralhq/corral/env"
)

// fakeEnv is a scripted env.Environment for unit tests of the registry's
// own logic; real-process tests live in local_test.go.
type fakeEnv struct {
	name string
	caps env.Capabilities

	mu       sync.Mutex
	procs    []*fakeProc
	startErr error
	closed   bool
	// onStart, when set, configures each new process.
	onStart func(*fakeProc)
}

func newFakeEnv() *fakeEnv {
	return &fakeEnv{name: "fake", caps: env.Capabilities{Stdin: true, PTY: true, Reattach: true, TreeKill: "fake"}}
}

func (e *fakeEnv) Name() string                   { return e.name }
func (e *fakeEnv) Capabilities() env.Capabilities { return e.caps }
func (e *fakeEnv) Attach(context.Context, env.Ref) (env.Process, error) {
	return nil, env.ErrUnsupported
}

func (e *fakeEnv) Start(ctx context.Context, spec env.Spec) (env.Process, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, env.ErrReleased
	}
	if e.startErr != nil {
		return nil, e.startErr
	}
	p := &fakeProc{spec: spec, pid: 1000 + len(e.procs), exited: make(chan struct{}), wake: make(chan struct{}),
		termExits: true}
	if e.onStart != nil {
		e.onStart(p)
	}
	e.procs = append(e.procs, p)
	return p, nil
}

func (e *fakeEnv) Close() error {
	e.mu.Lock()
	e.closed = true
	procs := slices.Clone(e.procs)
	e.mu.Unlock()
	for _, p := range procs {
		if !p.spec.Detach {
			p.exit(env.Signaled(env.SIGKILL))
		}
	}
	return nil
}

func (e *fakeEnv) last() *fakeProc {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.procs[len(e.procs)-1]
}

// fakeProc is a process whose output, exit and reaction to signals the
// test scripts.
type fakeProc struct {
	spec env.Spec
	pid  int

	mu        sync.Mutex
	out       []byte
	wake      chan struct{} // closed and replaced on every change
	exited    chan struct{}
	status    env.ExitStatus
	waitErr   error
	signals   []env.Signal
	stdin     []byte
	stdinDone bool
	survivors []int
	removed   bool
	released  bool
	// termExits: TERM (and INT, HUP) end the process with that signal;
	// otherwise only KILL does.
	termExits bool
	// trapTerm: TERM makes the process exit normally with code 0 (a
	// process that traps TERM and cleans up), taking precedence over
	// termExits.
	trapTerm bool
}

func (p *fakeProc) changed() {
	close(p.wake)
	p.wake = make(chan struct{})
}

func (p *fakeProc) write(s string) {
	p.mu.Lock()
	p.out = append(p.out, s...)
	p.changed()
	p.mu.Unlock()
}

func (p *fakeProc) exit(st env.ExitStatus) { p.exitErr(st, nil) }

func (p *fakeProc) exitErr(st env.ExitStatus, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.exited:
		return
	default:
	}
	p.status, p.waitErr = st, err
	close(p.exited)
	p.changed()
}

func (p *fakeProc) isExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

func (p *fakeProc) PID() int { return p.pid }

func (p *fakeProc) Output(ctx context.Context, offset int64) (io.ReadCloser, error) {
	return &fakeReader{p: p, off: offset, ctx: ctx, closed: make(chan struct{})}, nil
}

type fakeReader struct {
	p         *fakeProc
	off       int64
	ctx       context.Context
	closeOnce sync.Once
	closed    chan struct{}
}

func (r *fakeReader) Read(b []byte) (int, error) {
	for {
		r.p.mu.Lock()
		if r.off < int64(len(r.p.out)) {
			n := copy(b, r.p.out[r.off:])
			r.off += int64(n)
			r.p.mu.Unlock()
			return n, nil
		}
		if r.p.isExited() {
			err := r.p.waitErr
			r.p.mu.Unlock()
			if err != nil {
				return 0, err
			}
			return 0, io.EOF
		}
		wake := r.p.wake
		r.p.mu.Unlock()
		select {
		case <-wake:
		case <-r.ctx.Done():
			return 0, r.ctx.Err()
		case <-r.closed:
			return 0, errors.New("fake: reader closed")
		}
	}
}

func (r *fakeReader) Close() error {
	r.closeOnce.Do(func() { close(r.closed) })
	return nil
}

func (p *fakeProc) Write(ctx context.Context, b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.isExited() {
		return 0, env.ErrExited
	}
	if !p.spec.Stdin && p.spec.PTY == nil || p.stdinDone {
		return 0, env.ErrStdinClosed
	}
	p.stdin = append(p.stdin, b...)
	return len(b), nil
}

func (p *fakeProc) CloseStdin(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.isExited() {
		return env.ErrExited
	}
	p.stdinDone = true
	return nil
}

func (p *fakeProc) Signal(ctx context.Context, sig env.Signal) error {
	p.mu.Lock()
	if p.isExited() {
		p.mu.Unlock()
		return fmt.Errorf("fake: signal: %w", env.ErrExited)
	}
	p.signals = append(p.signals, sig)
	term := p.termExits && (sig == env.SIGTERM || sig == env.SIGINT || sig == env.SIGHUP)
	trap := p.trapTerm && sig == env.SIGTERM
	p.mu.Unlock()
	switch {
	case sig == env.SIGKILL:
		p.exit(env.Signaled(sig))
	case trap:
		p.exit(env.Exited(0))
	case term:
		p.exit(env.Signaled(sig))
	}
	return nil
}

func (p *fakeProc) sent() []env.Signal {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.signals)
}

func (p *fakeProc) Survivors(ctx context.Context) ([]int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.isExited() {
		return append([]int{p.pid}, p.survivors...), nil
	}
	return slices.Clone(p.survivors), nil
}

func (p *fakeProc) Wait(ctx context.Context) (env.ExitStatus, error) {
	select {
	case <-p.exited:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.status, p.waitErr
	case <-ctx.Done():
		return env.ExitStatus{}, ctx.Err()
	}
}

func (p *fakeProc) Resize(context.Context, env.WindowSize) error { return env.ErrUnsupported }

func (p *fakeProc) Ref() (env.Ref, error) {
	if !p.spec.Detach {
		return env.Ref{}, env.ErrUnsupported
	}
	data, _ := json.Marshal(map[string]string{"tag": p.spec.Tag})
	return env.Ref{Env: "fake", PID: p.pid, Data: data}, nil
}

func (p *fakeProc) Release() error {
	p.mu.Lock()
	p.released = true
	p.mu.Unlock()
	return nil
}

func (p *fakeProc) Remove(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.isExited() {
		return errors.New("fake: remove: still running")
	}
	p.removed = true
	return nil
}

// manualClock is a Clock the test advances by hand.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
}

type manualTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// Advance moves the clock and runs the callbacks that became due, in the
// caller's goroutine.
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []func()
	keep := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.stopped:
		case !t.at.After(c.now):
			t.stopped = true
			due = append(due, t.f)
		default:
			keep = append(keep, t)
		}
	}
	c.timers = keep
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
}
