package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/corralhq/corral/env"
)

// The kill protocol, one policy read top to bottom in proc.kill: the first
// signal (TERM by default) to the whole tree, the grace period, SIGKILL to
// whatever survived it (unless NoEscalate), then verification through
// Process.Survivors. Kill, KillAll and Run's timeouts all go through it.

// Bounds of the kill procedure beyond the caller's grace period.
const (
	// killExitWait is how long Kill waits for the process to exit after
	// SIGKILL before it reports what it knows.
	killExitWait = 10 * time.Second
	// verifyWait is how long Kill polls Survivors for the tree to vanish.
	verifyWait = 5 * time.Second
)

// Kill ends the process's tree: opts.Signal (default TERM; KILL when
// Force), then SIGKILL to whatever of the tree is still alive after the
// grace period (default Config.DefaultGrace), then verification through
// Process.Survivors. The process's final state is killed, whatever status
// it reports. With NoEscalate there is no SIGKILL: Kill waits up to the
// grace and reports whether the tree ended (KillResult.StillRunning).
//
// Kills of one process are serialised. A Kill that finds the leader
// already finished — on its own, or by an earlier Kill — reports
// AlreadyExited with the real status; what the leader left running is
// still signalled the same way, and counted in Ended.
func (r *Registry) Kill(ctx context.Context, id string, opts KillOptions) (KillResult, error) {
	p, err := r.lookup(id)
	if err != nil {
		return KillResult{}, err
	}
	sig, grace, err := r.killParams(opts.Signal, opts.Grace)
	if err != nil {
		return KillResult{}, err
	}
	if opts.Force {
		if opts.NoEscalate {
			return KillResult{}, fmt.Errorf("%w: force and no-escalate contradict each other: force sends SIGKILL at once", ErrInvalidOptions)
		}
		sig = env.SIGKILL
	}
	return p.kill(ctx, killPlan{sig: sig, grace: grace, escalate: !opts.NoEscalate, reason: StateKilled})
}

func (r *Registry) killParams(sig env.Signal, grace time.Duration) (env.Signal, time.Duration, error) {
	if sig == "" {
		sig = env.SIGTERM
	}
	if !sig.Valid() {
		return "", 0, fmt.Errorf("%w: unknown signal %q: use a name such as TERM, INT, HUP or KILL", ErrInvalidOptions, sig)
	}
	if grace < 0 {
		return "", 0, fmt.Errorf("%w: negative grace period %s", ErrInvalidOptions, grace)
	}
	if grace == 0 {
		grace = r.cfg.DefaultGrace
	}
	return sig, grace, nil
}

// killPlan is one kill procedure: the first signal, the grace before
// SIGKILL (or, without escalate, before giving up), and the final state to
// record when the kill ends the leader.
type killPlan struct {
	sig      env.Signal
	grace    time.Duration
	escalate bool
	reason   State  // StateKilled or StateTimedOut
	timedOut string // with StateTimedOut: which timeout
}

// kill runs plan against p's whole tree: the leader while it runs, and
// what it left running after it exited.
func (p *proc) kill(ctx context.Context, plan killPlan) (KillResult, error) {
	res := KillResult{ID: p.id}
	select {
	case <-p.started:
	case <-ctx.Done():
		return res, fmt.Errorf("registry: kill %s: %w", p.id, ctx.Err())
	}
	select {
	case p.killTurn <- struct{}{}:
	case <-ctx.Done():
		return res, fmt.Errorf("registry: kill %s: waiting for another kill of it: %w", p.id, ctx.Err())
	}
	defer func() { <-p.killTurn }()

	p.mu.Lock()
	h := p.handle
	leaderDone := p.state.Final()
	if leaderDone {
		res.AlreadyExited, res.State, res.Status = true, p.state, copyStatus(p.status)
		if h == nil || !p.treeLive.Load() {
			p.mu.Unlock()
			return res, nil
		}
	} else {
		p.signalling++
	}
	p.mu.Unlock()

	// Counted before the signal, so that Ended covers everything the kill
	// ends; a backend that cannot tell yields 0 and a lower bound.
	before, _ := h.Survivors(ctx)
	// Whatever ends the tree from here on is our doing, not a crash.
	p.ourSignal.Store(true)
	err := h.Signal(ctx, plan.sig)
	if !leaderDone {
		p.mu.Lock()
		p.signalling--
		if err == nil && p.killReason == "" {
			p.killReason, p.timedOut = plan.reason, plan.timedOut
		}
		p.cond.Broadcast()
		p.mu.Unlock()
		if err == nil {
			p.r.stateChanged()
		}
	}
	defer p.kickTree()
	if errors.Is(err, env.ErrExited) {
		// The leader ended before the signal got there (or had ended);
		// the signal still went to what it left running.
		if !leaderDone {
			p.awaitDone(ctx)
			in := p.info()
			res.AlreadyExited, res.State, res.Status = true, in.State, in.Status
		}
		if len(before) == 0 {
			return res, nil
		}
	} else if err != nil {
		return res, fmt.Errorf("registry: kill %s: send %s: %w", p.id, plan.sig, err)
	}
	res.Signal = plan.sig
	p.r.log.Debug("signalled", "id", p.id, "signal", plan.sig, "processes", len(before))

	if plan.sig != env.SIGKILL && !waitTreeGone(ctx, h, plan.grace) {
		if ctx.Err() != nil {
			return res, fmt.Errorf("registry: kill %s: %w", p.id, ctx.Err())
		}
		if !plan.escalate {
			return p.leftRunning(ctx, h, res, before)
		}
		// The leader may have died of the first signal while others
		// ignored it: SIGKILL then reaches them with ErrExited, and it is
		// an escalation all the same.
		switch err := h.Signal(ctx, env.SIGKILL); {
		case err == nil || errors.Is(err, env.ErrExited):
			res.Escalated = true
			p.r.log.Debug("escalated to SIGKILL", "id", p.id, "grace", plan.grace)
		default:
			return res, fmt.Errorf("registry: kill %s: send KILL after %s grace: %w", p.id, plan.grace, err)
		}
	}
	waitExit(ctx, h, killExitWait)

	// Verify: nothing of the tree may be left, escapees included.
	survivors, err := p.verify(ctx, h, &res)
	res.Survivors = survivors
	res.Ended = max(0, len(before)-len(survivors))
	if err != nil {
		p.r.log.Warn("kill verification failed", "id", p.id, "err", err)
	}
	p.awaitDone(ctx)
	if !res.AlreadyExited {
		in := p.info()
		res.State, res.Status = in.State, in.Status
	}
	if len(res.Survivors) > 0 {
		return res, fmt.Errorf("registry: kill %s: %d processes of the tree survived: %v", p.id, len(res.Survivors), res.Survivors)
	}
	return res, nil
}

// leftRunning finishes a kill without escalation whose grace passed with
// part of the tree alive. A leader that is still running was only
// signalled, not killed: should it exit later, that is its own exit.
func (p *proc) leftRunning(ctx context.Context, h env.Process, res KillResult, before []int) (KillResult, error) {
	res.StillRunning = true
	p.ourSignal.Store(false) // it survived the signal: a later end is its own
	p.mu.Lock()
	if !p.state.Final() {
		p.killReason, p.timedOut = "", ""
	}
	in := p.infoLocked()
	p.mu.Unlock()
	p.r.stateChanged()
	if !res.AlreadyExited {
		res.State, res.Status = in.State, in.Status
	}
	if now, err := h.Survivors(ctx); err == nil {
		res.Ended = max(0, len(before)-len(now))
	}
	return res, nil
}

// verify polls Survivors until the tree is gone or verifyWait passed,
// sending SIGKILL once to what is left.
func (p *proc) verify(ctx context.Context, h env.Process, res *KillResult) ([]int, error) {
	killed := res.Escalated || res.Signal == env.SIGKILL
	return pollSurvivors(ctx, h, time.Now().Add(verifyWait), func() {
		if killed {
			return
		}
		killed = true
		if err := h.Signal(ctx, env.SIGKILL); err == nil || errors.Is(err, env.ErrExited) {
			res.Escalated = true
		}
	})
}

// waitTreeGone waits up to d for the process to exit and then for the rest
// of its tree to go: the grace period is for every process that got the
// polite signal, not only the leader. A leader that dies at once while its
// descendants clean up (or ignore the signal) must not cut their grace.
func waitTreeGone(ctx context.Context, h env.Process, d time.Duration) bool {
	deadline := time.Now().Add(d)
	if !waitExit(ctx, h, d) {
		return false
	}
	s, err := pollSurvivors(ctx, h, deadline, nil)
	if ctx.Err() != nil {
		return false
	}
	return err != nil || len(s) == 0 // verify reports what an error hides
}

// pollSurvivors polls h.Survivors, backing off from 10 ms to 200 ms, until
// the tree is gone (nil, nil), Survivors fails (nil, err), until passes
// (what is left, nil) or ctx is done (what is left, ctx.Err()). onLeft,
// when set, runs after each poll that found survivors.
func pollSurvivors(ctx context.Context, h env.Process, until time.Time, onLeft func()) ([]int, error) {
	interval := 10 * time.Millisecond
	for {
		s, err := h.Survivors(ctx)
		if err != nil {
			return nil, err
		}
		if len(s) == 0 {
			return nil, nil
		}
		if onLeft != nil {
			onLeft()
		}
		left := time.Until(until)
		if left <= 0 {
			return s, nil
		}
		t := time.NewTimer(min(interval, left))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return s, ctx.Err()
		}
		interval = min(2*interval, 200*time.Millisecond)
	}
}

// waitExit waits up to d for the process to exit.
func waitExit(ctx context.Context, h env.Process, d time.Duration) bool {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	_, err := h.Wait(wctx)
	return err == nil || wctx.Err() == nil
}

// KillAll kills, concurrently, every running process carrying all of
// opts.Labels (every running process when Labels is empty). Results are
// sorted by ID; errors of individual kills are joined.
func (r *Registry) KillAll(ctx context.Context, opts KillAllOptions) ([]KillResult, error) {
	sig, grace, err := r.killParams(opts.Signal, opts.Grace)
	if err != nil {
		return nil, err
	}
	// selectProcs's default selection: running, or exited with part of
	// the tree still running.
	targets := r.selectProcs(ListOptions{Labels: opts.Labels})
	results := make([]KillResult, len(targets))
	errs := make([]error, len(targets))
	finished := make([]bool, len(targets))
	var wg sync.WaitGroup
	for i, p := range targets {
		finished[i] = p.endedAt.Load() != 0
		wg.Go(func() {
			results[i], errs[i] = p.kill(ctx, killPlan{sig: sig, grace: grace, escalate: !opts.NoEscalate, reason: StateKilled})
			results[i].ID = p.id
		})
	}
	wg.Wait()
	// A process that had finished before the selection and turned out to
	// have nothing left to signal (its tree was not looked at yet) is not
	// part of what KillAll did.
	kept := results[:0]
	for i, res := range results {
		if finished[i] && res.Signal == "" && errs[i] == nil {
			continue
		}
		kept = append(kept, res)
	}
	return kept, errors.Join(errs...)
}
