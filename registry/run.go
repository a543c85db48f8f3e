package registry

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/registry/ansi"
)

// killAfterCancel bounds the kill Run performs after its context was
// cancelled, beyond the grace period.
const killAfterCancel = 20 * time.Second

// Run runs a process in the foreground and returns its result: the held
// output (head and tail) and its final Info.
//
// Timeout and IdleTimeout (no output for that long) kill the whole tree —
// TERM, Grace, KILL, verification — and the result says which fired
// (TimedOut), with the output so far and the exit status; the state is
// timed_out. YieldAfter returns early instead, with Yielded set and the
// process still running in the background under Info.ID (it was started
// like Start: detached where the backend allows). Cancelling ctx kills the
// tree too and returns ctx's error with the result so far.
//
// Every Run is registered like Start, so its process shows up in List
// while it runs and its result stays available afterwards.
func (r *Registry) Run(ctx context.Context, opts RunOptions) (RunResult, error) {
	if opts.Timeout < 0 || opts.IdleTimeout < 0 || opts.YieldAfter < 0 {
		return RunResult{}, fmt.Errorf("%w: negative Timeout, IdleTimeout or YieldAfter", ErrInvalidOptions)
	}
	_, grace, err := r.killParams("", opts.Grace)
	if err != nil {
		return RunResult{}, err
	}
	// A registry that checkpoints (the daemon) may crash under a
	// foreground process as well: started detached, the next one can
	// re-attach it to kill it (Recover), where a plain child of the dead
	// supervisor would run on with nobody able to find it.
	yields := opts.YieldAfter > 0 || opts.YieldOnInput && (opts.PTY != nil || opts.Stdin)
	p, err := r.start(ctx, opts.StartOptions, startHow{
		detach: yields || r.ckpt != nil, foreground: !yields, tee: opts.Output, started: opts.Started,
		onInput: opts.OnWaitingInput, waiter: true})
	if p == nil {
		return RunResult{}, err
	}
	// Run is a waiter until it returns (start counted it); every return
	// path below calls result exactly once, which ends the wait.
	if err != nil {
		return r.result(p), err
	}
	defer p.detachTee()

	var timeoutC, yieldC, idleC <-chan time.Time
	if opts.Timeout > 0 {
		t := time.NewTimer(opts.Timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	if opts.YieldAfter > 0 {
		t := time.NewTimer(opts.YieldAfter)
		defer t.Stop()
		yieldC = t.C
	}
	var inputC <-chan time.Time
	if opts.YieldOnInput && (opts.PTY != nil || opts.Stdin) {
		// The watcher marks a wait every inputTick at most: looking at
		// the mark twice as often adds no delay worth a channel per
		// process.
		t := time.NewTicker(inputTick / 2)
		defer t.Stop()
		inputC = t.C
	}
	var idle *time.Timer
	if opts.IdleTimeout > 0 {
		idle = time.NewTimer(opts.IdleTimeout)
		defer idle.Stop()
		idleC = idle.C
	}

	for {
		var kind string
		select {
		case <-p.done:
			return r.result(p), nil
		case <-inputC:
			if p.input.current() == nil {
				continue
			}
			return r.yielded(p), nil
		case <-yieldC:
			return r.yielded(p), nil
		case <-timeoutC:
			kind = TimedOutTimeout
		case <-idleC:
			quiet := time.Since(time.Unix(0, p.lastOutput.Load()))
			if quiet < opts.IdleTimeout {
				idle.Reset(opts.IdleTimeout - quiet)
				continue
			}
			kind = TimedOutIdle
		case <-ctx.Done():
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace+killAfterCancel)
			kres, kerr := p.kill(kctx, killPlan{sig: env.SIGTERM, grace: grace, escalate: true, reason: StateKilled})
			p.awaitDone(kctx)
			cancel()
			res := r.result(p)
			res.Kill = &kres
			if kerr != nil {
				return res, fmt.Errorf("registry: run %s: %w (and the kill failed: %v)", p.id, ctx.Err(), kerr)
			}
			return res, fmt.Errorf("registry: run %s: %w", p.id, ctx.Err())
		case <-r.ctx.Done():
			return r.result(p), fmt.Errorf("registry: run %s: %w", p.id, ErrClosed)
		}
		// A timeout fired.
		r.log.Debug("run timed out", "id", p.id, "kind", kind)
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace+killAfterCancel)
		kres, kerr := p.kill(kctx, killPlan{sig: env.SIGTERM, grace: grace, escalate: true, reason: StateTimedOut, timedOut: kind})
		p.awaitDone(kctx)
		cancel()
		res := r.result(p)
		res.Kill = &kres
		if kerr != nil {
			return res, fmt.Errorf("registry: run %s: %s fired: %w", p.id, kind, kerr)
		}
		return res, nil
	}
}

// yielded is Run's result for p left running in the background.
func (r *Registry) yielded(p *proc) RunResult {
	p.detachTee()
	res := r.result(p)
	if !res.State.Final() {
		res.Yielded = true
	}
	return res
}

// result ends Run's wait on p (leaveWait) and snapshots p for Run's
// caller.
func (r *Registry) result(p *proc) RunResult {
	p.leaveWait()
	in := p.info()
	c := p.buf.ReadSince(0)
	in.OutputBytes = c.Next
	if in.State.Final() {
		p.finalSeen.Store(true)
	}
	return RunResult{Info: in, Output: c.Data, Truncated: c.Omitted > 0, OmittedBytes: c.Omitted, OmittedAt: c.OmittedAt}
}

// Log returns a window of the lines of the held output; see LogOptions.
func (r *Registry) Log(ctx context.Context, id string, opts LogOptions) (LogResult, error) {
	if opts.Offset < 0 || opts.Limit < 0 {
		return LogResult{}, fmt.Errorf("%w: negative Offset or Limit", ErrInvalidOptions)
	}
	p, err := r.lookup(id)
	if err != nil {
		return LogResult{}, err
	}
	in := p.info()
	if err := p.loadOutput(ctx, 0); err != nil {
		return LogResult{}, err
	}
	c := p.buf.ReadSince(0)
	head, tail := c.Data, []byte(nil)
	if c.Omitted > 0 {
		head, tail = c.Data[:c.OmittedAt], c.Data[c.OmittedAt:]
	}
	if opts.Strip {
		head, tail = ansi.Strip(head), ansi.Strip(tail)
	}
	lines := splitLines(head)
	if c.Omitted > 0 {
		lines = append(lines, fmt.Sprintf("[… %d bytes omitted …]", c.Omitted))
		lines = append(lines, splitLines(tail)...)
	}
	limit := opts.Limit
	if limit == 0 {
		limit = DefaultLogLines
	}
	start := max(len(lines)-limit, 0)
	if opts.Offset > 0 {
		start = min(opts.Offset-1, len(lines))
	}
	end := min(start+limit, len(lines))
	return LogResult{
		ID:           p.id,
		State:        in.State,
		Lines:        lines[start:end],
		Offset:       start + 1,
		TotalLines:   len(lines),
		OmittedBytes: c.Omitted,
		OutputBytes:  max(c.Next, in.OutputBytes),
	}, nil
}

// splitLines splits on newlines; a final newline does not start an empty
// line.
func splitLines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	s := strings.TrimSuffix(string(b), "\n")
	return strings.Split(s, "\n")
}
