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
	"github.com/corralhq/corral/internal/backoff"
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

	// first is the report Start brought back: state, log size and the log
	// from offset 0. The first Output from an offset it covers uses it
	// instead of a round trip; later ones poll, so that a replay still
	// sees what escaped descendants wrote after it was taken.
	first *report
}

// report is one poll's answer: the state (see state in sh/state.sh), the log size
// seen after it, and the log bytes from the poll's offset.
type report struct {
	state string
	size  int64
	data  []byte
}

// parseReport parses "STATE\nSIZE\n" followed by the raw log bytes.
func parseReport(out []byte) (report, error) {
	st, rest, ok1 := bytes.Cut(out, []byte("\n"))
	sz, data, ok2 := bytes.Cut(rest, []byte("\n"))
	size, err := strconv.ParseInt(string(sz), 10, 64)
	if !ok1 || !ok2 || err != nil || size < 0 {
		return report{}, fmt.Errorf("malformed poll reply %q", trunc(out))
	}
	return report{state: string(st), size: size, data: data}, nil
}

// takeFirst returns Start's report once, if its bytes begin at or before
// off.
func (p *process) takeFirst(off int64) *report {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.first
	if f == nil || off > int64(len(f.data)) {
		return nil
	}
	p.first = nil
	return f
}

// stepsFor returns the sleep steps for the next poll, and a function to
// call when it is done: a long poll while a slot is free, else a single
// look (empty steps) that the caller paces with its backoff.
func (e *Env) stepsFor() (steps string, done func()) {
	if release, ok := e.longPollSlot(); ok {
		return e.pollSteps, release
	}
	return "", func() {}
}

// longPollSlot takes one of the MaxLongPolls slots that long polls and
// follows share, if one is free and they are on (LongPoll >= 0).
func (e *Env) longPollSlot() (release func(), ok bool) {
	if e.pollSteps == "" {
		return nil, false
	}
	select {
	case e.longPolls <- struct{}{}:
		return sync.OnceFunc(func() { <-e.longPolls }), true
	default:
		return nil, false
	}
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
func (p *process) pause(ctx context.Context, b *backoff.Backoff, stop <-chan struct{}) error {
	kick := p.kicked()
	t := time.NewTimer(b.Next())
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-kick:
		b.Reset()
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

// state runs the wait script: "running", "code N", "signal N" (either
// followed by " oom" when the OOM killer ended the command), "lost" or
// "gone". With steps, it returns once the state is not "running" or the
// steps' sleeps are over.
func (p *process) state(ctx context.Context, steps string) (string, error) {
	r := p.ref
	out, err := p.e.call(ctx, "status", call("corral_wait", r.Dir, itoa(int(r.WPID)), itoa(int(r.WStart)), itoa(int(r.PID)), itoa(int(r.Start)), steps), true)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// parseState turns a state line into a final status; done is false while
// the process runs.
func (p *process) parseState(st string) (status env.ExitStatus, done bool, err error) {
	f := strings.Fields(st)
	oom := len(f) == 3 && f[2] == "oom"
	if oom {
		f = f[:2]
	}
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
			s := env.Exited(n)
			s.OOMKilled = oom
			return s, true, nil
		}
	case len(f) == 2 && f[0] == "signal":
		n, err := strconv.Atoi(f[1])
		if err == nil && n > 0 {
			sig := env.SignalFromNumber(n)
			if sig == "" {
				sig = env.Signal("SIG" + f[1])
			}
			s := env.Signaled(sig)
			s.OOMKilled = oom
			return s, true, nil
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
// interval. With a context that is already done it answers what the
// handle knows without a round trip: the status Start or Attach read, if
// the process had ended (a supervisor recovering many processes asks
// every one so).
func (p *process) Wait(ctx context.Context) (env.ExitStatus, error) {
	if err := p.check(); err != nil {
		return env.NoStatus, err
	}
	if s, ok := p.cached(); ok {
		return s, nil
	}
	if err := ctx.Err(); err != nil {
		return env.NoStatus, err
	}
	if st, ok, err := p.waitFollow(ctx); err != nil {
		return env.NoStatus, err
	} else if ok {
		s, _, err := p.parseState(st)
		if err != nil {
			return env.NoStatus, err
		}
		p.setStatus(s)
		return s, nil
	}
	b := newBackoff(p.e.opts.Poll)
	for {
		steps, release := p.e.stepsFor()
		st, err := p.state(ctx, steps)
		release()
		if err != nil {
			if ctx.Err() != nil {
				return env.NoStatus, ctx.Err()
			}
			return env.NoStatus, fmt.Errorf("wait: %w", err)
		}
		s, done, err := p.parseState(st)
		if err != nil {
			return env.NoStatus, err
		}
		if done {
			p.setStatus(s)
			return s, nil
		}
		if steps == "" {
			if err := p.pause(ctx, b, nil); err != nil {
				return env.NoStatus, err
			}
		}
		if err := p.check(); err != nil {
			return env.NoStatus, err
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
	// Close cancels a long poll in flight, which may wait a while.
	ctx, cancel := context.WithCancel(ctx)
	r := &outputReader{p: p, ctx: ctx, cancel: cancel, off: offset, stop: make(chan struct{}), b: newBackoff(p.e.opts.Poll), lastData: time.Now()}
	if f := p.takeFirst(offset); f != nil {
		rep := *f
		rep.data = rep.data[offset:]
		r.take(rep)
	}
	return r, nil
}

type outputReader struct {
	p      *process
	ctx    context.Context
	cancel context.CancelFunc
	off    int64
	buf    []byte
	done   bool
	b      *backoff.Backoff

	f        *followStream // the follow being read, if any
	retryAt  time.Time     // no follow before then: the last one broke
	noFollow bool          // the sandbox cannot follow output (see errNoDataFollow)
	lastData time.Time     // when the reader opened or last got bytes: paces follows

	closeOnce sync.Once
	stop      chan struct{}
}

// Close may run while Read blocks: the cancelled context ends a follow
// (its pipe is closed), a long poll, or a pause.
func (r *outputReader) Close() error {
	r.closeOnce.Do(func() {
		close(r.stop)
		r.cancel()
	})
	return nil
}

func (r *outputReader) closed() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

func (r *outputReader) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil // a follow's frame could not make progress into it
	}
	for len(r.buf) == 0 {
		if r.closed() {
			return 0, errClosed
		}
		if r.done {
			return 0, io.EOF
		}
		if err := r.p.check(); err != nil {
			return 0, err
		}
		if r.f == nil && !r.noFollow && !time.Now().Before(r.retryAt) {
			r.f = r.p.follow(r.ctx, r.off, true, time.Since(r.lastData))
		}
		if r.f != nil {
			n, err := r.readFollow(b)
			if n > 0 || err != nil {
				return n, err
			}
			continue
		}
		long, err := r.poll()
		if err != nil {
			if r.closed() {
				return 0, errClosed
			}
			return 0, err
		}
		if len(r.buf) == 0 && !r.done && !long {
			if err := r.p.pause(r.ctx, r.b, r.stop); err != nil {
				if r.closed() {
					return 0, errClosed
				}
				return 0, err
			}
		}
	}
	n := copy(b, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// readFollow reads from the follow: log bytes into b, or the end. A follow
// that broke is dropped and the reader polls, which resyncs from r.off,
// for followRetry before it tries another; one that ran out of its idle
// budget is replaced at once. (0, nil) means: look again.
func (r *outputReader) readFollow(b []byte) (int, error) {
	f, p := r.f, r.p
	var err error
	if f.left == 0 {
		var st string
		if st, err = f.frame(); err == nil && f.left == 0 {
			r.endFollow()
			s, finished, serr := p.parseState(st)
			if st == "gone" || serr != nil && !errors.Is(serr, env.ErrNotFound) {
				return 0, serr
			}
			if finished && serr == nil {
				p.setStatus(s)
			}
			r.done = true
			return 0, nil
		}
	}
	n := 0
	if err == nil {
		n, err = f.read(b)
		r.off += int64(n)
		if n > 0 {
			r.b.Reset()
			r.lastData = time.Now()
		}
	}
	if err != nil {
		r.endFollow()
		switch {
		case r.closed():
			return n, errClosed
		case r.ctx.Err() != nil:
			if n > 0 {
				return n, nil
			}
			return 0, r.ctx.Err()
		case errors.Is(err, errNoDataFollow):
			r.noFollow = true
		case !errors.Is(err, errFollowIdle):
			p.e.opts.Logger.Debug("nohup: follow broke; polling", "env", p.e.opts.Name, "pid", p.ref.PID, "offset", r.off, "err", err)
			r.retryAt = time.Now().Add(followRetry)
		}
	}
	return n, nil
}

func (r *outputReader) endFollow() {
	r.f.close()
	r.f = nil
}

// poll does one round trip: state, log size and new bytes. long reports
// whether it was a long poll, which needs no pause before the next.
func (r *outputReader) poll() (long bool, err error) {
	p := r.p
	steps, release := p.e.stepsFor()
	head, tail := env.LogKeep(p.e.opts.LogMax)
	line := call("corral_poll", p.ref.Dir, itoa(int(p.ref.WPID)), itoa(int(p.ref.WStart)), itoa(int(p.ref.PID)), itoa(int(p.ref.Start)),
		strconv.FormatInt(r.off, 10), strconv.FormatInt(p.e.opts.ChunkSize, 10), steps, strconv.FormatInt(head, 10), strconv.FormatInt(tail, 10))
	out, err := p.e.call(r.ctx, "output", line, true)
	release()
	if err != nil {
		if r.ctx.Err() != nil {
			return false, r.ctx.Err()
		}
		return false, err
	}
	rep, err := parseReport(out)
	if err != nil {
		return false, fmt.Errorf("%s: output: %w", p.name(), err)
	}
	if rep.state == "gone" {
		_, _, serr := p.parseState(rep.state)
		return false, serr
	}
	if _, _, serr := p.parseState(rep.state); serr != nil && !errors.Is(serr, env.ErrNotFound) {
		return false, serr
	}
	r.take(rep)
	return steps != "", nil
}

// take consumes one report whose bytes start at r.off.
func (r *outputReader) take(rep report) {
	p := r.p
	s, finished, serr := p.parseState(rep.state)
	if len(rep.data) > 0 {
		r.buf = rep.data
		r.off += int64(len(rep.data))
		r.b.Reset()
		r.lastData = time.Now()
	}
	if finished && r.off >= rep.size {
		if serr == nil {
			p.setStatus(s)
		}
		r.done = true
	}
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
	if _, err := p.e.call(ctx, "close stdin", call("corral_closestdin", p.ref.Dir), false); err != nil {
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
	out, err := p.e.call(ctx, "signal", call("corral_signal", p.ref.Dir, itoa(int(p.ref.PID)), itoa(int(p.ref.Start)), p.ref.Tag, string(sig)), false)
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
	out, err := p.e.call(ctx, "survivors", call("corral_survivors", p.ref.Dir, itoa(int(p.ref.PID)), itoa(int(p.ref.Start)), p.ref.Tag), true)
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
	r := p.ref
	out, err := p.e.call(ctx, "remove", call("corral_remove", r.Dir, itoa(int(r.WPID)), itoa(int(r.WStart)), itoa(int(r.PID)), itoa(int(r.Start))), false)
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(out)) == "running" {
		return fmt.Errorf("%s: remove: the process is still running; kill it first", p.name())
	}
	return p.Release()
}
