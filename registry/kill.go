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
// whatever survived it (unless Escalate is false), then verification through
// Process.Survivors. Kill, KillAll and Run's timeouts all go through it.
//
// Every backend call of a kill has a deadline (killCallTimeout), and the
// whole procedure one more (the grace plus killBound), so that a backend
// that does not answer holds a kill up for seconds, not for as long as it
// stays sick. A kill whose backend did not answer — a health check found
// it paused or unreachable before anything was sent, or a call of the kill
// overran its deadline or failed with env.ErrUnavailable — is reported
// Unreachable, never killed, and left pending: the registry runs it again
// when the backend's health check finds it ok (resumePending), as SIGKILL
// straight away when the first signal had got through and the plan
// escalates, and publishes the outcome as a kill_finished event. A
// process whose tree ends meanwhile (its sandbox gone, say) has its
// pending kill settled with it.

// Bounds of the kill procedure beyond the caller's grace period.
const (
	// killCallTimeout bounds one backend call of a kill: a signal, a look
	// at the tree.
	killCallTimeout = 5 * time.Second
	// killBound bounds everything a kill does besides waiting the grace:
	// the calls, the wait for the exit after SIGKILL, the verification.
	killBound = 15 * time.Second
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
// it reports. With Escalate false there is no SIGKILL: Kill waits up to the
// grace and reports whether the tree ended (KillResult.StillRunning).
//
// Kills of one process are serialised. A Kill that finds the leader
// already finished — on its own, or by an earlier Kill — reports
// AlreadyExited with the real status; what the leader left running is
// still signalled the same way, and counted in Ended.
//
// Kill returns within the grace plus killBound. When the backend does not
// answer, the result is Unreachable, the error matches ErrUnreachable,
// and the kill stays pending (see the file's comment).
func (r *Registry) Kill(ctx context.Context, id string, opts KillOptions) (KillResult, error) {
	p, err := r.lookup(id)
	if err != nil {
		return KillResult{}, err
	}
	plan, err := r.planKill(opts)
	if err != nil {
		return KillResult{}, err
	}
	return p.kill(ctx, plan)
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

// pendingKill is a kill the backend did not answer, to run again when it
// does. The caller holds p.mu to read or change it.
type pendingKill struct {
	plan    killPlan
	since   time.Time
	running bool // resumePending is running it
}

// pendingKillRecord is a pending kill in the state file. Grace is in
// nanoseconds.
type pendingKillRecord struct {
	Signal   env.Signal    `json:"signal"`
	Grace    time.Duration `json:"grace,omitempty"`
	Escalate bool          `json:"escalate,omitempty"`
	Reason   State         `json:"reason,omitempty"`
	TimedOut string        `json:"timed_out,omitempty"`
	Since    time.Time     `json:"since,omitzero"`
}

// record is pk as the state file keeps it; nil for none. The caller holds
// the process's mu.
func (pk *pendingKill) record() *pendingKillRecord {
	if pk == nil {
		return nil
	}
	return &pendingKillRecord{Signal: pk.plan.sig, Grace: pk.plan.grace, Escalate: pk.plan.escalate,
		Reason: pk.plan.reason, TimedOut: pk.plan.timedOut, Since: pk.since}
}

// restore is the pending kill a record describes; nil for none, and for
// one this registry did not write (a bad signal or state is dropped rather
// than guessed at).
func (rec *pendingKillRecord) restore() *pendingKill {
	if rec == nil || !rec.Signal.Valid() || rec.Grace < 0 {
		return nil
	}
	reason := rec.Reason
	if reason != StateTimedOut {
		reason = StateKilled
	}
	return &pendingKill{since: rec.Since, plan: killPlan{sig: rec.Signal, grace: rec.Grace, escalate: rec.Escalate, reason: reason, timedOut: rec.TimedOut}}
}

// kill runs plan against p's whole tree: the leader while it runs, and
// what it left running after it exited.
func (p *proc) kill(ctx context.Context, plan killPlan) (KillResult, error) {
	res := KillResult{ID: p.id}
	ctx, cancel := context.WithTimeout(ctx, plan.grace+killBound)
	defer cancel()
	select {
	case <-p.started:
	case <-ctx.Done():
		return res, fmt.Errorf("registry: kill %s: it is still starting: %w", p.id, ctx.Err())
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
	}
	p.mu.Unlock()

	// A backend that a health check found not answering is not waited
	// for: nothing could be sent.
	if hl, probed := p.r.freshCondition(ctx, p.backend); probed && (hl.Condition == env.ConditionPaused || hl.Condition == env.ConditionUnreachable) {
		return p.leavePending(res, plan, false, fmt.Sprintf("%s is %s: %s", p.backend, hl.Condition, hl.Detail))
	}
	if !leaderDone {
		p.mu.Lock()
		p.signalling++
		p.mu.Unlock()
	}

	// Counted before the signal, so that Ended covers everything the kill
	// ends; a backend that cannot tell yields 0 and a lower bound.
	before, err := p.survivors(ctx, h)
	if unanswered(err) {
		p.endSignalling(leaderDone, false, plan)
		return p.leavePending(res, plan, false, p.noAnswer("a look at the tree", err))
	}
	// Whatever ends the tree from here on is our doing, not a crash.
	p.ourSignal.Store(true)
	err = p.signal(ctx, h, plan.sig)
	p.endSignalling(leaderDone, err == nil, plan)
	defer p.kickTree()
	switch {
	case errors.Is(err, env.ErrExited):
		// The leader ended before the signal got there (or had ended);
		// the signal still went to what it left running.
		if !leaderDone {
			p.awaitDone(ctx)
			in := p.info()
			res.AlreadyExited, res.State, res.Status = true, in.State, in.Status
		}
		if len(before) == 0 {
			p.settlePending()
			return res, nil
		}
	case unanswered(err):
		p.ourSignal.Store(false)
		return p.leavePending(res, plan, false, p.noAnswer("the "+string(plan.sig)+" signal", err))
	case err != nil:
		return res, fmt.Errorf("registry: kill %s: send %s: %w", p.id, plan.sig, err)
	}
	res.Signal = plan.sig
	p.r.log.Debug("signalled", "id", p.id, "signal", plan.sig, "processes", len(before))

	if plan.sig != env.SIGKILL {
		gone, err := p.waitTreeGone(ctx, h, plan.grace)
		if unanswered(err) {
			return p.leavePending(res, plan, true, p.noAnswer("a look at the tree after the signal", err))
		}
		if !gone {
			if err := ctx.Err(); err != nil {
				return p.leavePending(res, plan, true, p.noAnswer("the kill", err))
			}
			if !plan.escalate {
				return p.leftRunning(ctx, h, res, before)
			}
			// The leader may have died of the first signal while others
			// ignored it: SIGKILL then reaches them with ErrExited, and it
			// is an escalation all the same.
			switch err := p.signal(ctx, h, env.SIGKILL); {
			case err == nil || errors.Is(err, env.ErrExited):
				res.Escalated = true
				p.r.log.Debug("escalated to SIGKILL", "id", p.id, "grace", plan.grace)
			case unanswered(err):
				return p.leavePending(res, plan, true, p.noAnswer("SIGKILL after the grace period", err))
			default:
				return res, fmt.Errorf("registry: kill %s: send KILL after %s grace: %w", p.id, plan.grace, err)
			}
		}
	}
	waitExit(ctx, h, killExitWait)

	// Verify: nothing of the tree may be left, escapees included.
	survivors, err := p.verify(ctx, h, &res)
	if unanswered(err) {
		return p.leavePending(res, plan, true, p.noAnswer("the verification that the tree is gone", err))
	}
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
	if err == nil && len(survivors) == 0 && res.State.Final() {
		// The verification saw nothing of the tree left: say so now, not
		// at the tree watcher's next look, so that what the kill returns
		// and a listing right after it agree (TreeRunning false).
		p.treeGone()
	}
	p.settlePending()
	if len(res.Survivors) > 0 {
		return res, fmt.Errorf("registry: kill %s: %d processes of the tree survived: %v", p.id, len(res.Survivors), res.Survivors)
	}
	return res, nil
}

// endSignalling ends the window opened before the first signal (while the
// leader ran): once the signal was delivered the process is the kill's
// (killReason), and finish, which waits for the window to close, records
// it so.
func (p *proc) endSignalling(leaderDone, delivered bool, plan killPlan) {
	if leaderDone {
		return
	}
	p.mu.Lock()
	p.signalling--
	if delivered && p.killReason == "" {
		p.killReason, p.timedOut = plan.reason, plan.timedOut
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	if delivered {
		p.r.stateChanged()
	}
}

// treeCallsPerBackend bounds the calls on process trees (a kill's
// signals and looks at the tree, the looks that follow a tree after its
// leader's exit) in flight on one backend. The others queue, a kill's
// within the kill's bound (its grace plus killBound), and a call's own
// deadline (killCallTimeout) starts with its turn. Unbounded, a kill
// --all of a score of processes in a container on a loaded machine, or
// their pending kills resumed together once it answered again, shared
// the sandbox and the engine so evenly that every call overran its
// deadline at the same moment, round after round, and no kill ever
// finished; bounded, the calls in flight finish and the queue moves. Four
// is the nohup engine's resident shells.
const treeCallsPerBackend = 4

// treeCallTurn waits, within ctx, for a call's turn on target's trees;
// the caller calls release when the call is done. Without an opened
// environment there is nothing to bound.
func (r *Registry) treeCallTurn(ctx context.Context, target string) (release func(), err error) {
	slot := r.slotOf(target)
	if slot == nil {
		return func() {}, nil
	}
	select {
	case slot.treeCalls <- struct{}{}:
		return func() { <-slot.treeCalls }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%d other calls on %s's process trees were still under way: %w", treeCallsPerBackend, target, ctx.Err())
	}
}

// treeLook is Survivors in its turn (treeCallTurn), for the looks that
// are not a kill's.
func (p *proc) treeLook(ctx context.Context, h env.Process) ([]int, error) {
	release, err := p.r.treeCallTurn(ctx, p.backend)
	if err != nil {
		return nil, err
	}
	defer release()
	return h.Survivors(ctx)
}

// signal sends sig with a deadline, and tells the backend's health what
// it saw.
func (p *proc) signal(ctx context.Context, h env.Process, sig env.Signal) error {
	release, err := p.r.treeCallTurn(ctx, p.backend)
	if err != nil {
		return err // the backend was not asked: nothing to observe
	}
	defer release()
	cctx, wrap, cancel := p.r.callCtx(ctx, p.backend, killCallTimeout)
	defer cancel()
	err = wrap(h.Signal(cctx, sig))
	p.r.observe(p.backend, answered(err), "a signal")
	return err
}

// survivors asks for the tree with a deadline, and tells the backend's
// health what it saw.
func (p *proc) survivors(ctx context.Context, h env.Process) ([]int, error) {
	release, err := p.r.treeCallTurn(ctx, p.backend)
	if err != nil {
		return nil, err
	}
	defer release()
	cctx, wrap, cancel := p.r.callCtx(ctx, p.backend, killCallTimeout)
	defer cancel()
	s, err := h.Survivors(cctx)
	err = wrap(err)
	p.r.observe(p.backend, answered(err), "a look at the tree")
	return s, err
}

// answered maps a call's error to what it says about the backend: an
// error that is an answer (the process exited, is not found) is nil.
func answered(err error) error {
	if err != nil && !unanswered(err) {
		return nil
	}
	return err
}

// noAnswer says in one sentence which call of a kill got no answer.
func (p *proc) noAnswer(what string, err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("%s did not answer %s in time", p.backend, what)
	}
	return fmt.Sprintf("%s did not answer %s: %s", p.backend, what, clip(err.Error(), 160))
}

// leavePending ends a kill the backend did not answer: the result says
// Unreachable (never killed), and the kill is kept to run again once the
// backend answers; as SIGKILL when the first signal had been delivered
// and the plan escalates (its grace has begun).
func (p *proc) leavePending(res KillResult, plan killPlan, delivered bool, why string) (KillResult, error) {
	next := plan
	if delivered && plan.escalate {
		next.sig = env.SIGKILL
	}
	p.mu.Lock()
	switch {
	case p.pending == nil:
		p.pending = &pendingKill{plan: next, since: time.Now()}
	case !p.pending.running:
		// A later kill asks for more (KILL after TERM), or the same.
		if next.sig == env.SIGKILL || next.escalate {
			p.pending.plan = next
		}
	}
	in := p.infoLocked()
	p.mu.Unlock()
	p.r.stateChanged()
	if slot := p.r.slotOf(p.backend); slot != nil {
		slot.health.poke()
	}
	p.r.log.Warn("kill left pending: the backend did not answer", "id", p.id, "backend", p.backend, "why", why)
	res.Unreachable, res.Detail = true, why
	if !res.AlreadyExited {
		res.State, res.Status = in.State, in.Status
	}
	return res, fmt.Errorf("%w: %s was not killed: %s; the kill is pending and runs when %s answers again",
		ErrUnreachable, p.id, why, p.backend)
}

// settlePending drops a pending kill that a kill has just done (it ran to
// its end: the tree is killed, or found gone).
func (p *proc) settlePending() {
	p.mu.Lock()
	had := p.pending != nil && !p.pending.running
	if had {
		p.pending = nil
	}
	p.mu.Unlock()
	if had {
		p.r.stateChanged()
	}
}

// resumePending runs, in the background, the pending kills of target's
// processes that are not running already. Called when a health check
// finds the backend ok.
func (r *Registry) resumePending(target string) {
	r.mu.Lock()
	var procs []*proc
	for _, p := range r.procs {
		if p.backend == target {
			procs = append(procs, p)
		}
	}
	r.mu.Unlock()
	for _, p := range procs {
		p.mu.Lock()
		pk := p.pending
		if pk == nil || pk.running {
			p.mu.Unlock()
			continue
		}
		pk.running = true
		plan := pk.plan
		p.mu.Unlock()
		if !r.goTracked(func() { p.finishPending(pk, plan) }) {
			return
		}
	}
}

// finishPending runs a pending kill and publishes its outcome; a backend
// that does not answer again leaves it pending.
func (p *proc) finishPending(pk *pendingKill, plan killPlan) {
	p.r.log.Info("running a pending kill: the backend answers again", "id", p.id, "backend", p.backend, "signal", plan.sig)
	res, err := p.kill(p.r.ctx, plan)
	p.mu.Lock()
	still := p.pending == pk
	if still {
		pk.running = false
		if !res.Unreachable && p.r.ctx.Err() == nil {
			p.pending = nil
		}
	}
	done := still && p.pending == nil
	p.mu.Unlock()
	if !done {
		return
	}
	p.r.stateChanged()
	p.publishKillFinished(res, err)
}

// publishKillFinished publishes a pending kill's outcome.
func (p *proc) publishKillFinished(res KillResult, err error) {
	how := string(res.State)
	switch {
	case err != nil:
		how = "failed: " + clip(err.Error(), 200)
	case res.AlreadyExited && res.Signal == "":
		how = "had already ended: " + how
	case res.Status != nil:
		how = fmt.Sprintf("%s (%s)", how, res.Status)
	}
	r := res
	p.r.ev.publish(Event{Type: EventKillFinished, ID: p.id, Command: p.opts.Command, State: res.State, Status: res.Status, Kill: &r,
		Summary: fmt.Sprintf("%s: the pending kill ran now that %s answers: %s", p.label(), p.backend, how)})
}

// dropPending settles the pending kill of a process whose tree is known
// to have ended without it (the sandbox gone, say): there is nothing left
// to kill, and the kill_finished event says so.
func (p *proc) dropPending() {
	p.mu.Lock()
	pk := p.pending
	if pk == nil || pk.running {
		p.mu.Unlock()
		return
	}
	p.pending = nil
	in := p.infoLocked()
	p.mu.Unlock()
	p.r.stateChanged()
	p.publishKillFinished(KillResult{ID: p.id, AlreadyExited: true, State: in.State, Status: in.Status}, nil)
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
	if now, err := p.survivors(ctx, h); err == nil {
		res.Ended = max(0, len(before)-len(now))
	}
	p.settlePending()
	return res, nil
}

// verify polls Survivors until the tree is gone or verifyWait passed,
// sending SIGKILL once to what is left.
func (p *proc) verify(ctx context.Context, h env.Process, res *KillResult) ([]int, error) {
	killed := res.Escalated || res.Signal == env.SIGKILL
	return p.pollSurvivors(ctx, h, time.Now().Add(verifyWait), func() {
		if killed {
			return
		}
		killed = true
		if err := p.signal(ctx, h, env.SIGKILL); err == nil || errors.Is(err, env.ErrExited) {
			res.Escalated = true
		}
	})
}

// waitTreeGone waits up to d for the process to exit and then for the rest
// of its tree to go: the grace period is for every process that got the
// polite signal, not only the leader. A leader that dies at once while its
// descendants clean up (or ignore the signal) must not cut their grace.
// An error is returned only when the backend did not answer (unanswered);
// other failures of Survivors count as gone, and verify reports what they
// hide.
func (p *proc) waitTreeGone(ctx context.Context, h env.Process, d time.Duration) (bool, error) {
	deadline := time.Now().Add(d)
	if !waitExit(ctx, h, d) {
		return false, nil
	}
	s, err := p.pollSurvivors(ctx, h, deadline, nil)
	switch {
	case unanswered(err):
		return false, err
	case ctx.Err() != nil:
		return false, nil
	}
	return err != nil || len(s) == 0, nil
}

// pollSurvivors polls Survivors (each call bounded), backing off from 10
// ms to 200 ms, until the tree is gone (nil, nil), Survivors fails (nil,
// err), until passes (what is left, nil) or ctx is done (what is left,
// ctx.Err()). onLeft, when set, runs after each poll that found
// survivors.
func (p *proc) pollSurvivors(ctx context.Context, h env.Process, until time.Time, onLeft func()) ([]int, error) {
	return pollTree(ctx, func(ctx context.Context) ([]int, error) { return p.survivors(ctx, h) }, until, onLeft)
}

// pollTree is pollSurvivors with survivors as the look at the tree.
func pollTree(ctx context.Context, survivors func(context.Context) ([]int, error), until time.Time, onLeft func()) ([]int, error) {
	interval := 10 * time.Millisecond
	for {
		s, err := survivors(ctx)
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
	plan, err := r.planKill(opts.killOptions())
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
			results[i], errs[i] = p.kill(ctx, plan)
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
