package nohup

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/env"
)

// process is a handle on a wrapped process.
type process struct {
	e   *Env
	ref refData

	mu          sync.Mutex
	released    bool
	status      *env.ExitStatus // cached once known
	stdinClosed bool
	kick        chan struct{} // closed (and replaced) by Signal: pollers speed up
	writeMu     sync.Mutex    // keeps concurrent Writes from interleaving
}

func (e *Env) newProcess(r refData) *process {
	return &process{e: e, ref: r, kick: make(chan struct{})}
}

// kicked returns the channel the next Signal closes.
func (p *process) kicked() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.kick
}

// wake makes every poller poll now and restart from the fast interval: a
// signal usually ends the process soon.
func (p *process) wake() {
	p.mu.Lock()
	close(p.kick)
	p.kick = make(chan struct{})
	p.mu.Unlock()
}

// pause waits the backoff's next interval, or less when a signal is sent.
func (p *process) pause(ctx context.Context, b *backoff, stop <-chan struct{}) error {
	kick := p.kicked()
	t := time.NewTimer(b.next())
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-kick:
		b.reset()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-stop:
		return errClosed
	}
}

func (p *process) name() string { return fmt.Sprintf("nohup %s: pid %d", p.e.opts.Name, p.ref.PID) }

func (p *process) check() error {
	p.mu.Lock()
	rel := p.released
	p.mu.Unlock()
	if rel {
		return fmt.Errorf("%s: %w", p.name(), env.ErrReleased)
	}
	return p.e.checkOpen()
}

func (p *process) PID() int { return int(p.ref.PID) }

// state runs the status script: "running", "code N", "signal N", "lost" or
// "gone".
func (p *process) state(ctx context.Context) (string, error) {
	out, err := p.e.exec(ctx, "status", script(statusBody, p.ref.Dir, itoa(int(p.ref.WPID)), itoa(int(p.ref.WStart))), nil, true)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// parseState turns a state line into a final status; done is false while
// the process runs.
func (p *process) parseState(st string) (status env.ExitStatus, done bool, err error) {
	f := strings.Fields(st)
	switch {
	case st == "running":
		return env.ExitStatus{}, false, nil
	case st == "gone":
		return env.ExitStatus{}, true, fmt.Errorf("%s: state directory %s is gone: %w", p.name(), p.ref.Dir, env.ErrNotFound)
	case st == "lost":
		return env.ExitStatus{}, true, fmt.Errorf("%s: lost: the wrapper ended without recording an exit status (sandbox restarted or wrapper killed): %w", p.name(), env.ErrNotFound)
	case len(f) == 2 && f[0] == "code":
		n, err := strconv.Atoi(f[1])
		if err == nil && n >= 0 && n <= 255 {
			return env.Exited(n), true, nil
		}
	case len(f) == 2 && f[0] == "signal":
		n, err := strconv.Atoi(f[1])
		if sig := env.SignalFromNumber(n); err == nil && sig != "" {
			return env.Signaled(sig), true, nil
		}
		if err == nil && n > 0 {
			return env.Signaled(env.Signal("SIG" + f[1])), true, nil
		}
	}
	return env.ExitStatus{}, true, fmt.Errorf("%s: unreadable exit file %q", p.name(), st)
}

func (p *process) cached() (env.ExitStatus, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.status != nil {
		return *p.status, true
	}
	return env.ExitStatus{}, false
}

func (p *process) setStatus(s env.ExitStatus) {
	p.mu.Lock()
	p.status = &s
	p.mu.Unlock()
}

// Wait implements env.Process: it polls the exit file with the adaptive
// interval.
func (p *process) Wait(ctx context.Context) (env.ExitStatus, error) {
	if err := p.check(); err != nil {
		return env.ExitStatus{}, err
	}
	if s, ok := p.cached(); ok {
		return s, nil
	}
	b := newBackoff(p.e.opts.Poll)
	for {
		st, err := p.state(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return env.ExitStatus{}, ctx.Err()
			}
			return env.ExitStatus{}, fmt.Errorf("wait: %w", err)
		}
		s, done, err := p.parseState(st)
		if err != nil {
			return env.ExitStatus{}, err
		}
		if done {
			p.setStatus(s)
			return s, nil
		}
		if err := p.pause(ctx, b, nil); err != nil {
			return env.ExitStatus{}, err
		}
		if err := p.check(); err != nil {
			return env.ExitStatus{}, err
		}
	}
}

// Output implements env.Process. Each poll moves at most Options.ChunkSize
// new bytes. The stream ends once the exit file exists and the log is read
// up to the size seen after it appeared; what escaped descendants write
// later stays readable with a new Output from that offset (no grace).
func (p *process) Output(ctx context.Context, offset int64) (io.ReadCloser, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, fmt.Errorf("%s: output: negative offset %d", p.name(), offset)
	}
	return &outputReader{p: p, ctx: ctx, off: offset, stop: make(chan struct{}), b: newBackoff(p.e.opts.Poll)}, nil
}

type outputReader struct {
	p    *process
	ctx  context.Context
	off  int64
	buf  []byte
	done bool
	b    *backoff

	closeOnce sync.Once
	stop      chan struct{}
}

func (r *outputReader) Close() error {
	r.closeOnce.Do(func() { close(r.stop) })
	return nil
}

func (r *outputReader) Read(b []byte) (int, error) {
	for len(r.buf) == 0 {
		select {
		case <-r.stop:
			return 0, errClosed
		default:
		}
		if r.done {
			return 0, io.EOF
		}
		if err := r.p.check(); err != nil {
			return 0, err
		}
		if err := r.poll(); err != nil {
			return 0, err
		}
		if len(r.buf) == 0 && !r.done {
			if err := r.p.pause(r.ctx, r.b, r.stop); err != nil {
				return 0, err
			}
		}
	}
	n := copy(b, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// poll does one round trip: state, log size and new bytes.
func (r *outputReader) poll() error {
	p := r.p
	scr := script(pollBody, p.ref.Dir, itoa(int(p.ref.WPID)), itoa(int(p.ref.WStart)),
		strconv.FormatInt(r.off, 10), strconv.FormatInt(p.e.opts.ChunkSize, 10))
	out, err := p.e.exec(r.ctx, "output", scr, nil, true)
	if err != nil {
		if r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		return err
	}
	st, rest, ok1 := bytes.Cut(out, []byte("\n"))
	sz, data, ok2 := bytes.Cut(rest, []byte("\n"))
	size, err := strconv.ParseInt(string(sz), 10, 64)
	if !ok1 || !ok2 || err != nil {
		return fmt.Errorf("%s: output: malformed poll reply %q", p.name(), trunc(out))
	}
	s, finished, serr := p.parseState(string(st))
	if serr != nil && !errors.Is(serr, env.ErrNotFound) {
		return serr
	}
	if string(st) == "gone" {
		return serr
	}
	if len(data) > 0 {
		r.buf = data
		r.off += int64(len(data))
		r.b.reset()
	}
	if finished && r.off >= size {
		if serr == nil {
			p.setStatus(s)
		}
		r.done = true
	}
	return nil
}

func trunc(b []byte) []byte {
	if len(b) > 200 {
		return b[:200]
	}
	return b
}

// Write implements env.Process.
func (p *process) Write(ctx context.Context, b []byte) (int, error) {
	if err := p.check(); err != nil {
		return 0, err
	}
	p.mu.Lock()
	closed := p.stdinClosed || !p.ref.Stdin
	p.mu.Unlock()
	if closed {
		return 0, fmt.Errorf("%s: write: %w", p.name(), env.ErrStdinClosed)
	}
	if len(b) == 0 {
		return 0, nil
	}
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	out, err := p.e.exec(ctx, "write", script(writeBody, p.ref.Dir), bytes.NewReader(b), false)
	if err != nil {
		return 0, err
	}
	switch strings.TrimSpace(string(out)) {
	case "ok":
		return len(b), nil
	case "exited":
		return 0, fmt.Errorf("%s: write: %w", p.name(), env.ErrExited)
	case "closed":
		return 0, fmt.Errorf("%s: write: %w", p.name(), env.ErrStdinClosed)
	}
	return 0, fmt.Errorf("%s: write: unexpected reply %q", p.name(), trunc(out))
}

// CloseStdin implements env.Process.
func (p *process) CloseStdin(ctx context.Context) error {
	if err := p.check(); err != nil {
		return err
	}
	if !p.ref.Stdin {
		return nil
	}
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	if _, err := p.e.exec(ctx, "close stdin", script(closeStdinBody, p.ref.Dir), nil, false); err != nil {
		return err
	}
	p.mu.Lock()
	p.stdinClosed = true
	p.mu.Unlock()
	return nil
}

// Signal implements env.Process.
func (p *process) Signal(ctx context.Context, sig env.Signal) error {
	if err := p.check(); err != nil {
		return err
	}
	return p.signal(ctx, sig)
}

func (p *process) signal(ctx context.Context, sig env.Signal) error {
	if !sig.Valid() {
		return fmt.Errorf("%s: signal: unknown signal %q", p.name(), string(sig))
	}
	out, err := p.e.exec(ctx, "signal", script(signalBody, p.ref.Dir, itoa(int(p.ref.PID)), itoa(int(p.ref.Start)), p.ref.Tag, string(sig)), nil, false)
	if err != nil {
		return err
	}
	switch first, _, _ := strings.Cut(string(out), "\n"); first {
	case "sent":
		p.wake()
		return nil
	case "exited":
		return fmt.Errorf("%s: signal %s: %w", p.name(), sig, env.ErrExited)
	}
	return fmt.Errorf("%s: signal %s: unexpected reply %q", p.name(), sig, trunc(out))
}

// Survivors implements env.Process.
func (p *process) Survivors(ctx context.Context) ([]int, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	out, err := p.e.exec(ctx, "survivors", script(survivorsBody, p.ref.Dir, itoa(int(p.ref.PID)), itoa(int(p.ref.Start)), p.ref.Tag), nil, true)
	if err != nil {
		return nil, err
	}
	var pids []int
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		n, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
		if err != nil {
			return nil, fmt.Errorf("%s: survivors: unexpected line %q", p.name(), sc.Text())
		}
		pids = append(pids, n)
	}
	return pids, nil
}

// Resize implements env.Process: there is never a PTY.
func (p *process) Resize(ctx context.Context, size env.WindowSize) error {
	if err := p.check(); err != nil {
		return err
	}
	return fmt.Errorf("%s: resize: %w", p.name(), env.ErrUnsupported)
}

// Ref implements env.Process. Every wrapped process is detached inside the
// sandbox, so a Ref is always available.
func (p *process) Ref() (env.Ref, error) {
	if err := p.check(); err != nil {
		return env.Ref{}, err
	}
	data, err := json.Marshal(p.ref)
	if err != nil {
		return env.Ref{}, fmt.Errorf("%s: ref: %w", p.name(), err)
	}
	return env.Ref{Env: p.e.opts.Name, PID: int(p.ref.PID), Data: data}, nil
}

// Release implements env.Process.
func (p *process) Release() error {
	p.mu.Lock()
	p.released = true
	p.mu.Unlock()
	p.e.forget(p)
	return nil
}

// Remove implements env.Process.
func (p *process) Remove(ctx context.Context) error {
	if err := p.check(); err != nil {
		return err
	}
	out, err := p.e.exec(ctx, "remove", script(removeBody, p.ref.Dir, itoa(int(p.ref.WPID)), itoa(int(p.ref.WStart))), nil, false)
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(out)) == "running" {
		return fmt.Errorf("%s: remove: the process is still running; kill it first", p.name())
	}
	return p.Release()
}
