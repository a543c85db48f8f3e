package envtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/corralhq/corral/env"
)

// Fake is a scripted env.Environment that runs nothing: the test decides
// what each process writes, when and how it ends, and how it answers
// signals. It is for unit tests of code that drives an Environment (the
// registry, the plugin SDK's server, a plugin's own glue), where a real
// process would tie the outcome to timing. It is not a backend to test:
// run the conformance suite ([Run]) on the real one for that.
//
// The zero value is ready to use. A typical test:
//
//	fe := &envtest.Fake{Caps: env.Capabilities{Stdin: true}}
//	fe.OnStart = func(p *envtest.FakeProcess) error {
//		p.Ignore(env.SIGTERM) // a process only SIGKILL ends
//		return nil
//	}
//	// … hand fe to the code under test, which starts a process …
//	p := fe.Last()
//	p.WriteOutput("hello\n")
//	p.Exit(env.Exited(3))
//	// … check what the code under test made of it, and p.Signals() …
//
// The Fake keeps the env contract where a test can observe it:
//
//   - Start validates the Spec ([env.Spec.Validate]), calls OnStart, and
//     returns a process that runs until the test ends it ([FakeProcess.Exit],
//     [FakeProcess.Lose]), a signal ends it, or Close kills it (when it was
//     not started with Detach).
//   - Output replays from any offset, any number of times; a read blocks
//     until more output, the end, or ctx; the stream ends with io.EOF after
//     Exit, with Lose's error after Lose.
//   - Write collects stdin when the Spec asked for stdin or a PTY, until
//     CloseStdin; both return env.ErrExited once the process ended.
//   - Signal records the signal and ends the process as the test scripted
//     it (see [FakeProcess.Ignore] and [FakeProcess.Trap]); once the process
//     ended it returns env.ErrExited.
//   - Survivors lists the process while it runs, plus the PIDs given to
//     [FakeProcess.SetSurvivors], which stay "alive" after it ended.
//   - Ref works for processes started with Detach, and Attach on the same
//     Fake returns a new handle on that process (env.ErrNotFound once it was
//     removed).
//   - After Release (or Remove) a handle's methods return env.ErrReleased,
//     and blocked reads and Waits on it return; after Close, Start and
//     Attach do.
//
// Capabilities returns Caps as set: the Fake accepts PTY, stdin and Detach
// specs whatever Caps says, so a test can present any capability set to
// the code under test. A PTY is only recorded (no terminal, no "\r\n"
// translation); Resize records the size on a process with a PTY.
//
// All methods are safe for concurrent use. Set Caps and OnStart before the
// Fake is shared, or change them only from the goroutine that calls Start.
type Fake struct {
	// Caps is what Capabilities reports.
	Caps env.Capabilities

	// OnStart, when set, is called by Start with each new process before
	// Start returns it: it may script the process (Ignore, Trap,
	// SetSurvivors, WriteOutput, Exit, or a goroutine that does so later)
	// or return an error, which Start then returns unchanged (the process
	// is dropped). It must not call the Fake's own methods.
	OnStart func(p *FakeProcess) error

	mu      sync.Mutex
	procs   []*FakeProcess
	states  []*fakeState
	started int
	closed  bool
}

var (
	_ env.Environment = (*Fake)(nil)
	_ env.Process     = (*FakeProcess)(nil)
)

// Name returns "fake".
func (f *Fake) Name() string { return "fake" }

// Capabilities returns f.Caps.
func (f *Fake) Capabilities() env.Capabilities { return f.Caps }

// Start starts a scripted process for spec; see Fake.
func (f *Fake) Start(ctx context.Context, spec env.Spec) (env.Process, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("fake: start: %w", err)
	}
	if spec.Limits != nil {
		// As a real backend: a limit not in Caps.Limits is refused.
		if err := env.CheckLimits("fake", f.Capabilities(), *spec.Limits); err != nil {
			return nil, fmt.Errorf("fake: start: %w", err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, fmt.Errorf("fake: start: %w", env.ErrReleased)
	}
	s := &fakeState{
		spec:   spec,
		pid:    1000 + f.started,
		wake:   make(chan struct{}),
		exited: make(chan struct{}),
		ends:   map[env.Signal]env.ExitStatus{},
	}
	for _, sig := range []env.Signal{env.SIGHUP, env.SIGINT, env.SIGTERM} {
		s.ends[sig] = env.Signaled(sig)
	}
	f.started++
	p := newFakeHandle(s)
	if f.OnStart != nil {
		if err := f.OnStart(p); err != nil {
			return nil, err
		}
	}
	f.procs = append(f.procs, p)
	f.states = append(f.states, s)
	return p, nil
}

// fakeRefData is the Data of a Fake's Ref.
type fakeRefData struct {
	PID int    `json:"pid"`
	Tag string `json:"tag,omitempty"`
}

// Attach returns a new handle on the detached process ref names, which
// this Fake started.
func (f *Fake) Attach(ctx context.Context, ref env.Ref) (env.Process, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, fmt.Errorf("fake: attach: %w", env.ErrReleased)
	}
	var rd fakeRefData
	if ref.Env != f.Name() || json.Unmarshal(ref.Data, &rd) != nil {
		return nil, fmt.Errorf("fake: attach: not a Ref of this backend: %w", env.ErrNotFound)
	}
	for _, s := range f.states {
		if s.pid != rd.PID || !s.spec.Detach {
			continue
		}
		s.mu.Lock()
		removed := s.removed
		s.mu.Unlock()
		if removed {
			break
		}
		return newFakeHandle(s), nil
	}
	return nil, fmt.Errorf("fake: attach: process %d: %w", rd.PID, env.ErrNotFound)
}

// Close ends, as killed by SIGKILL, every process that was not started
// with Detach and still runs. Later Starts and Attaches return
// env.ErrReleased. Close is idempotent.
func (f *Fake) Close() error {
	f.mu.Lock()
	f.closed = true
	states := slices.Clone(f.states)
	f.mu.Unlock()
	for _, s := range states {
		if !s.spec.Detach {
			s.mu.Lock()
			s.end(env.Signaled(env.SIGKILL), nil)
			s.mu.Unlock()
		}
	}
	return nil
}

// Closed reports whether Close was called.
func (f *Fake) Closed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// Procs returns the handles Start returned, in the order of the starts.
func (f *Fake) Procs() []*FakeProcess {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.procs)
}

// Last returns the handle the latest Start returned, or nil.
func (f *Fake) Last() *FakeProcess {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.procs) == 0 {
		return nil
	}
	return f.procs[len(f.procs)-1]
}

// FakeProcess is a handle on a process of a Fake: an env.Process, plus the
// methods a test scripts the process with and inspects it by. Scripting
// and inspection act on the process, whichever handle is used, and keep
// working after the handle was released.
type FakeProcess struct {
	s        *fakeState
	once     sync.Once
	released chan struct{}
}

// fakeState is one process, shared by its handles.
type fakeState struct {
	spec env.Spec
	pid  int

	mu          sync.Mutex
	out         []byte
	wake        chan struct{} // closed and replaced on every change
	exited      chan struct{}
	status      env.ExitStatus
	waitErr     error
	signals     []env.Signal
	ends        map[env.Signal]env.ExitStatus // signals that end the process, and how
	stdin       []byte
	stdinClosed bool
	survivors   []int
	size        env.WindowSize
	removed     bool
	waits       int
}

func newFakeHandle(s *fakeState) *FakeProcess {
	return &FakeProcess{s: s, released: make(chan struct{})}
}

// changed wakes blocked readers; s.mu is held.
func (s *fakeState) changed() {
	close(s.wake)
	s.wake = make(chan struct{})
}

// end ends the process unless it already ended; s.mu is held.
func (s *fakeState) end(st env.ExitStatus, err error) {
	if s.isExited() {
		return
	}
	s.status, s.waitErr = st, err
	close(s.exited)
	s.changed()
}

func (s *fakeState) isExited() bool {
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// check returns env.ErrReleased once the handle was released.
func (p *FakeProcess) check(op string) error {
	select {
	case <-p.released:
		return fmt.Errorf("fake: %s: %w", op, env.ErrReleased)
	default:
		return nil
	}
}

// Spec returns the Spec the process was started with.
func (p *FakeProcess) Spec() env.Spec { return p.s.spec }

// WriteOutput appends s to the process's output (it may be called after
// the process ended: output of a leftover descendant).
func (p *FakeProcess) WriteOutput(s string) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	p.s.out = append(p.s.out, s...)
	p.s.changed()
}

// Exit ends the process with st: Wait returns st, the output stream ends
// with io.EOF. Only the first end counts (Exit, Lose, a signal, Close).
func (p *FakeProcess) Exit(st env.ExitStatus) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	p.s.end(st, nil)
}

// Lose ends the process as one the backend lost track of: Wait returns
// err, and so does the output stream after the output written so far.
// Only the first end counts.
func (p *FakeProcess) Lose(err error) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	p.s.end(env.ExitStatus{}, err)
}

// Ignore makes sigs leave the process running. By default SIGTERM, SIGINT
// and SIGHUP end it as killed by that signal; SIGKILL always does, and
// cannot be ignored; other signals are only recorded.
func (p *FakeProcess) Ignore(sigs ...env.Signal) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	for _, sig := range sigs {
		delete(p.s.ends, sig)
	}
}

// Trap makes sig end the process with st, like a command that traps sig
// and exits. SIGKILL cannot be trapped.
func (p *FakeProcess) Trap(sig env.Signal, st env.ExitStatus) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	p.s.ends[sig] = st
}

// SetSurvivors sets PIDs that Survivors reports as still alive, before and
// after the process ended: a tree a kill did not end.
func (p *FakeProcess) SetSurvivors(pids ...int) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	p.s.survivors = slices.Clone(pids)
}

// Exited returns a channel that is closed once the process ended.
func (p *FakeProcess) Exited() <-chan struct{} { return p.s.exited }

// Released returns a channel that is closed once this handle was released
// (by Release or Remove).
func (p *FakeProcess) Released() <-chan struct{} { return p.released }

// Signals returns the signals delivered so far, in order.
func (p *FakeProcess) Signals() []env.Signal {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	return slices.Clone(p.s.signals)
}

// Stdin returns what was written to the process's stdin so far.
func (p *FakeProcess) Stdin() []byte {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	return slices.Clone(p.s.stdin)
}

// StdinClosed reports whether CloseStdin was called.
func (p *FakeProcess) StdinClosed() bool {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	return p.s.stdinClosed
}

// Size returns the PTY window size: the Spec's, or the latest Resize.
func (p *FakeProcess) Size() env.WindowSize {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if p.s.size == (env.WindowSize{}) && p.s.spec.PTY != nil {
		return *p.s.spec.PTY
	}
	return p.s.size
}

// Removed reports whether Remove succeeded.
func (p *FakeProcess) Removed() bool {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	return p.s.removed
}

// Waits returns how many times Wait was called, on any handle.
func (p *FakeProcess) Waits() int {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	return p.s.waits
}

// PID returns the process's fake PID: 1000 for a Fake's first start, then
// counting up.
func (p *FakeProcess) PID() int { return p.s.pid }

// Output returns the output from offset on; see Fake.
func (p *FakeProcess) Output(ctx context.Context, offset int64) (io.ReadCloser, error) {
	if err := p.check("output"); err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, fmt.Errorf("fake: output: negative offset %d", offset)
	}
	return &fakeReader{p: p, off: offset, ctx: ctx, closed: make(chan struct{})}, nil
}

type fakeReader struct {
	p         *FakeProcess
	off       int64
	ctx       context.Context
	closeOnce sync.Once
	closed    chan struct{}
}

func (r *fakeReader) Read(b []byte) (int, error) {
	s := r.p.s
	for {
		if err := r.p.check("read output"); err != nil {
			return 0, err
		}
		s.mu.Lock()
		if r.off < int64(len(s.out)) {
			n := copy(b, s.out[r.off:])
			r.off += int64(n)
			s.mu.Unlock()
			return n, nil
		}
		if s.isExited() {
			err := s.waitErr
			s.mu.Unlock()
			if err != nil {
				return 0, err
			}
			return 0, io.EOF
		}
		wake := s.wake
		s.mu.Unlock()
		select {
		case <-wake:
		case <-r.p.released:
		case <-r.ctx.Done():
			return 0, r.ctx.Err()
		case <-r.closed:
			return 0, errors.New("fake: read output: reader closed")
		}
	}
}

func (r *fakeReader) Close() error {
	r.closeOnce.Do(func() { close(r.closed) })
	return nil
}

// Write appends b to the process's stdin; see Fake.
func (p *FakeProcess) Write(ctx context.Context, b []byte) (int, error) {
	if err := p.check("write"); err != nil {
		return 0, err
	}
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if p.s.isExited() {
		return 0, fmt.Errorf("fake: write: %w", env.ErrExited)
	}
	if !p.s.spec.Stdin && p.s.spec.PTY == nil || p.s.stdinClosed {
		return 0, fmt.Errorf("fake: write: %w", env.ErrStdinClosed)
	}
	p.s.stdin = append(p.s.stdin, b...)
	return len(b), nil
}

// CloseStdin closes stdin: later Writes return env.ErrStdinClosed.
func (p *FakeProcess) CloseStdin(ctx context.Context) error {
	if err := p.check("close stdin"); err != nil {
		return err
	}
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if p.s.isExited() {
		return fmt.Errorf("fake: close stdin: %w", env.ErrExited)
	}
	p.s.stdinClosed = true
	return nil
}

// Signal records sig and ends the process if sig is scripted to; see
// Ignore and Trap.
func (p *FakeProcess) Signal(ctx context.Context, sig env.Signal) error {
	if err := p.check("signal"); err != nil {
		return err
	}
	if !sig.Valid() {
		return fmt.Errorf("fake: signal: unknown signal %q", string(sig))
	}
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if p.s.isExited() {
		return fmt.Errorf("fake: signal %s: %w", sig, env.ErrExited)
	}
	p.s.signals = append(p.s.signals, sig)
	if sig == env.SIGKILL {
		p.s.end(env.Signaled(sig), nil)
	} else if st, ok := p.s.ends[sig]; ok {
		p.s.end(st, nil)
	}
	return nil
}

// Survivors returns the process's PID while it runs, and the PIDs given
// to SetSurvivors.
func (p *FakeProcess) Survivors(ctx context.Context) ([]int, error) {
	if err := p.check("survivors"); err != nil {
		return nil, err
	}
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if !p.s.isExited() {
		return append([]int{p.s.pid}, p.s.survivors...), nil
	}
	return slices.Clone(p.s.survivors), nil
}

// Wait waits until the process ended, ctx is done, or the handle is
// released.
func (p *FakeProcess) Wait(ctx context.Context) (env.ExitStatus, error) {
	if err := p.check("wait"); err != nil {
		return env.NoStatus, err
	}
	p.s.mu.Lock()
	p.s.waits++
	p.s.mu.Unlock()
	select {
	case <-p.s.exited:
		p.s.mu.Lock()
		defer p.s.mu.Unlock()
		return p.s.status, p.s.waitErr
	case <-p.released:
		return env.NoStatus, p.check("wait")
	case <-ctx.Done():
		return env.NoStatus, ctx.Err()
	}
}

// Resize records size on a process with a PTY; without one it returns
// env.ErrUnsupported.
func (p *FakeProcess) Resize(ctx context.Context, size env.WindowSize) error {
	if err := p.check("resize"); err != nil {
		return err
	}
	if p.s.spec.PTY == nil {
		return fmt.Errorf("fake: resize: no PTY: %w", env.ErrUnsupported)
	}
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	p.s.size = size
	return nil
}

// Ref returns the reference Attach takes, for a process started with
// Detach; env.ErrUnsupported otherwise.
func (p *FakeProcess) Ref() (env.Ref, error) {
	if err := p.check("ref"); err != nil {
		return env.Ref{}, err
	}
	if !p.s.spec.Detach {
		return env.Ref{}, fmt.Errorf("fake: ref: not started with Detach: %w", env.ErrUnsupported)
	}
	data, err := json.Marshal(fakeRefData{PID: p.s.pid, Tag: p.s.spec.Tag})
	if err != nil {
		return env.Ref{}, err
	}
	return env.Ref{Env: "fake", PID: p.s.pid, Data: data}, nil
}

// Release releases the handle; the process goes on. It is idempotent.
func (p *FakeProcess) Release() error {
	p.once.Do(func() { close(p.released) })
	return nil
}

// Remove forgets the process (Attach no longer finds it) and releases the
// handle. It refuses while the process runs.
func (p *FakeProcess) Remove(ctx context.Context) error {
	if err := p.check("remove"); err != nil {
		return err
	}
	p.s.mu.Lock()
	if !p.s.isExited() {
		p.s.mu.Unlock()
		return errors.New("fake: remove: the process still runs")
	}
	p.s.removed = true
	p.s.mu.Unlock()
	return p.Release()
}
