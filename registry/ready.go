package registry

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/env"
)

// Readiness (StartOptions.Ready): every condition given must hold.
//
//   - Port: through the process's env.PortWaiter when it has one (a
//     backend that would pay a round trip per look waits in its sandbox),
//     else by polling its env.PortLister, one Listeners call per look, at
//     an interval of a fiftieth of the process's age clamped to [20 ms,
//     1 s]: quick while a server starts, cheap when it takes long; and at
//     least four times the last look's own cost, so that a backend whose
//     look is dear (local without cgroups scans every process) spends at
//     most a fifth of a core per watched process.
//   - Pattern: matched by the copying goroutine on complete ANSI-stripped
//     lines (lineSplitter, as the watch patterns are); no polling.
//   - URL: polled at the same interval with env.URLChecker, once the port
//     condition (if any) holds.
//
// Nothing is polled once the process is ready or its tree has ended: a
// crash of a ready process is seen on the exit path (crashed event).

// Poll bounds of the port and URL conditions.
const (
	readyPollMin = 20 * time.Millisecond
	readyPollMax = time.Second
)

// readiness is a process's readiness conditions and progress.
type readiness struct {
	opts ReadyOptions
	re   *regexp.Regexp // nil without Pattern
	// lines feeds the pattern; used by the copying goroutine only, and
	// nil once the pattern matched.
	lines   *lineSplitter
	pending atomic.Int32  // conditions not yet held: the pattern; port and URL
	ch      chan struct{} // closed once ready (or restored ready)

	mu       sync.Mutex
	cancel   context.CancelFunc // ends the port and URL watch
	failed   error              // the conditions can never hold (the backend cannot check them)
	failedCh chan struct{}      // closed when failed is set
}

// validateReady checks StartOptions.Ready and returns its compiled state
// (nil without conditions).
func validateReady(ro *ReadyOptions) (*readiness, error) {
	if ro == nil {
		return nil, nil
	}
	if ro.Port == 0 && ro.Pattern == "" && ro.URL == "" {
		return nil, fmt.Errorf("%w: readiness needs a port, a pattern or a URL", ErrInvalidOptions)
	}
	rd := &readiness{opts: *ro, ch: make(chan struct{}), failedCh: make(chan struct{})}
	if ro.Port != 0 {
		if err := env.ValidatePort(ro.Port); err != nil {
			return nil, fmt.Errorf("%w: ready port: %v", ErrInvalidOptions, err)
		}
	}
	if ro.URL != "" {
		if err := env.ValidateCheckURL(ro.URL); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidOptions, err)
		}
	}
	if ro.Port != 0 || ro.URL != "" {
		rd.pending.Add(1)
	}
	if ro.Pattern != "" {
		re, err := regexp.Compile(ro.Pattern)
		if err != nil {
			return nil, fmt.Errorf("%w: ready pattern %q: %v (Go RE2 syntax)", ErrInvalidOptions, ro.Pattern, err)
		}
		rd.re, rd.lines = re, &lineSplitter{}
		rd.pending.Add(1)
	}
	return rd, nil
}

// checkReadyCaps refuses readiness conditions the backend cannot check,
// before anything is registered. The error matches env.ErrUnsupported and,
// for the transports, ErrInvalidOptions: the request is the caller's to
// change.
func checkReadyCaps(e env.Environment, ro *ReadyOptions) error {
	if ro == nil {
		return nil
	}
	caps := e.Capabilities()
	if ro.Port != 0 && !caps.Ports {
		return fmt.Errorf("%w: readiness by port: backend %q cannot see which ports a process listens on: %w (wait for a pattern instead)",
			ErrInvalidOptions, e.Name(), env.ErrUnsupported)
	}
	if _, ok := e.(env.URLChecker); ro.URL != "" && (!caps.CheckURL || !ok) {
		return fmt.Errorf("%w: readiness by URL: backend %q cannot make HTTP requests from inside its sandbox: %w (wait for a port or a pattern instead)",
			ErrInvalidOptions, e.Name(), env.ErrUnsupported)
	}
	return nil
}

func (rd *readiness) isReady() bool {
	select {
	case <-rd.ch:
		return true
	default:
		return false
	}
}

func (rd *readiness) setFailed(err error) {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if rd.failed == nil {
		rd.failed = err
		close(rd.failedCh)
	}
}

func (rd *readiness) failure() error {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	return rd.failed
}

// stop ends the port and URL watch (the tree ended, or Close).
func (rd *readiness) stop() {
	rd.mu.Lock()
	cancel := rd.cancel
	rd.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// feedReady matches output against the readiness pattern; called by the
// copying goroutine.
func (p *proc) feedReady(b []byte) {
	rd := p.ready
	if rd == nil || rd.lines == nil {
		return
	}
	matched := false
	rd.lines.feed(b, false, func(line []byte) bool {
		matched = rd.re.Match(line)
		return !matched
	})
	if matched {
		rd.lines = nil
		p.conditionHeld()
	}
}

// conditionHeld counts one condition as holding, and marks the process
// ready when it was the last.
func (p *proc) conditionHeld() {
	if p.ready.pending.Add(-1) != 0 {
		return
	}
	p.markReady(time.Now())
	close(p.ready.ch)
	p.r.stateChanged()
	p.r.log.Debug("ready", "id", p.id)
	p.r.ev.publish(Event{Type: EventReady, ID: p.id, Command: p.opts.Command, State: StateRunning,
		Summary: fmt.Sprintf("%s is ready: %s", p.label(), readyWords(p.ready.opts))})
}

// label is the process's ID, with its name when it has one.
func (p *proc) label() string {
	if p.opts.Name != "" {
		return fmt.Sprintf("%s (%s)", p.id, p.opts.Name)
	}
	return p.id
}

// readyWords says what made a process ready.
func readyWords(ro ReadyOptions) string {
	var parts []string
	if ro.Port != 0 {
		parts = append(parts, fmt.Sprintf("listening on %d", ro.Port))
	}
	if ro.URL != "" {
		parts = append(parts, ro.URL+" answers")
	}
	if ro.Pattern != "" {
		parts = append(parts, fmt.Sprintf("printed a line matching %q", ro.Pattern))
	}
	return strings.Join(parts, ", ")
}

// armReady starts the port and URL watch of a process that is not ready
// yet; h is its handle, e its environment.
func (p *proc) armReady(h env.Process, e env.Environment) {
	rd := p.ready
	if rd == nil || rd.isReady() || (rd.opts.Port == 0 && rd.opts.URL == "") {
		return
	}
	ctx, cancel := context.WithCancel(p.r.ctx)
	rd.mu.Lock()
	rd.cancel = cancel
	rd.mu.Unlock()
	if !p.treeLive.Load() {
		cancel() // the tree ended before the watch began
	}
	if !p.r.goTracked(func() {
		defer cancel()
		if err := p.watchPortURL(ctx, h, e); err != nil {
			if ctx.Err() == nil {
				rd.setFailed(err)
				p.r.log.Warn("readiness cannot be checked", "id", p.id, "err", err)
			}
			return
		}
		p.conditionHeld()
	}) {
		cancel()
	}
}

// watchPortURL returns once the port and then the URL condition hold, or
// with an error when ctx ends or they cannot be checked.
func (p *proc) watchPortURL(ctx context.Context, h env.Process, e env.Environment) error {
	ro := p.ready.opts
	if ro.Port != 0 {
		if err := p.waitPort(ctx, h, ro.Port); err != nil {
			return err
		}
	}
	if ro.URL != "" {
		uc, ok := e.(env.URLChecker)
		if !ok {
			return fmt.Errorf("registry: ready URL of %s: backend %q cannot make HTTP requests: %w", p.id, e.Name(), env.ErrUnsupported)
		}
		return p.pollReady(ctx, func() (bool, error) {
			status, err := uc.CheckURL(ctx, ro.URL)
			if errors.Is(err, env.ErrUnsupported) {
				return false, fmt.Errorf("registry: ready URL of %s: %w", p.id, err)
			}
			return err == nil && env.URLReady(status), nil
		})
	}
	return nil
}

// waitPort waits until the process's tree listens on port.
func (p *proc) waitPort(ctx context.Context, h env.Process, port int) error {
	if pw, ok := h.(env.PortWaiter); ok {
		_, err := pw.WaitListening(ctx, []int{port})
		if err == nil || ctx.Err() != nil {
			return err
		}
		if _, ok := h.(env.PortLister); !ok || errors.Is(err, env.ErrReleased) {
			return fmt.Errorf("registry: ready port of %s: %w", p.id, err)
		}
		p.r.log.Debug("waiting for a port failed; polling instead", "id", p.id, "err", err)
	}
	pl, ok := h.(env.PortLister)
	if !ok {
		return fmt.Errorf("registry: ready port of %s: its backend cannot see sockets: %w", p.id, env.ErrUnsupported)
	}
	return p.pollReady(ctx, func() (bool, error) {
		ls, err := pl.Listeners(ctx)
		if errors.Is(err, env.ErrUnsupported) || errors.Is(err, env.ErrReleased) {
			return false, fmt.Errorf("registry: ready port of %s: %w", p.id, err)
		}
		for _, l := range ls {
			if l.Port == port {
				return true, nil
			}
		}
		return false, nil
	})
}

// pollReady calls check until it holds, fails, or ctx ends, at an
// interval of the process's age / 50 clamped to [readyPollMin,
// readyPollMax].
func (p *proc) pollReady(ctx context.Context, check func() (bool, error)) error {
	started := p.startedTime()
	for {
		begun := time.Now()
		ok, err := check()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		// A look that costs much (a tree found by scanning every process of
		// a busy machine took 130-390 ms) is spaced so that looking takes at
		// most a fifth of the watcher's time.
		t := time.NewTimer(readyPollInterval(time.Since(started), time.Since(begun)))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// readyCostFactor spaces looks at least this many times their own cost
// apart.
const readyCostFactor = 4

// readyPollInterval is the pause after a look that took cost, for a
// process of that age.
func readyPollInterval(age, cost time.Duration) time.Duration {
	return max(min(max(age/50, readyPollMin), readyPollMax), readyCostFactor*cost)
}

// WaitReady blocks until the process is ready (every condition of
// StartOptions.Ready holds) and returns its Info with ReadyAt set. When
// the process's tree ends first it returns the final Info with ReadyAt
// zero and no error; when timeout (0: until ctx is done) elapses first,
// an error matching ErrWaitTimeout with the current Info. A process
// started without readiness conditions is ErrInvalidOptions; one whose
// conditions its backend cannot check, an error matching
// env.ErrUnsupported.
func (r *Registry) WaitReady(ctx context.Context, id string, timeout time.Duration) (Info, error) {
	p, err := r.lookup(id)
	if err != nil {
		return Info{}, err
	}
	if timeout < 0 {
		return Info{}, fmt.Errorf("%w: negative wait timeout %s", ErrInvalidOptions, timeout)
	}
	rd := p.ready
	if rd == nil {
		return p.info(), fmt.Errorf("%w: %s was started without readiness conditions (a port, a pattern or a URL): wait for its end instead",
			ErrInvalidOptions, p.label())
	}
	if err := rd.failure(); err != nil {
		return p.info(), err
	}
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	// Counted as a waiter: when the tree ends first, this caller gets
	// the end, which its exited event then does not repeat.
	p.enterWait()
	var werr error
	select {
	case <-rd.ch:
	case <-p.treeDone:
	case <-rd.failedCh:
	case <-timer:
		werr = fmt.Errorf("%w: %s is %s and not ready after %s (waiting for: %s); wait again, or look at its output",
			ErrWaitTimeout, p.label(), runningWords(p.info()), timeout, readyWords(rd.opts))
	case <-ctx.Done():
		werr = ctx.Err()
	case <-r.ctx.Done():
		werr = fmt.Errorf("registry: wait for %s to be ready: %w", p.id, ErrClosed)
	}
	ended := p.leaveWait()
	if rd.isReady() {
		return p.info(), nil
	}
	if ended && !p.treeLive.Load() {
		return p.info(), nil
	}
	if err := rd.failure(); err != nil && werr == nil {
		return p.info(), err
	}
	return p.info(), werr
}
