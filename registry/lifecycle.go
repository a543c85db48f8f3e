package registry

import (
	"slices"
	"time"

	"github.com/corralhq/corral/env"
)

// The lifecycle of a process, in one place: the states it may move
// between (transitions), and the methods that move it. Nothing else
// assigns procLife's fields or closes its started and done channels, but
// for the delivery of the result (finalSeen, waiters), which is the
// callers' business (events.go, wait.go, run.go).
//
//	(new) ── Start ──────────▶ starting ──▶ running ──▶ exited, killed, timed_out, lost
//	  │                           └──────────────────▶ failed
//	  └── Recover ──▶ recovering ──▶ running, or any final state
//	  └── Recover (a finished record) ──▶ its final state
//
// A final state is never left.

// transitions lists the states a process in each state may move to. The
// zero State is a process being made: Start makes it starting, Recover
// recovering, or in the final state its record holds.
var transitions = map[State][]State{
	"":              {StateStarting, StateRecovering, StateExited, StateKilled, StateTimedOut, StateLost, StateFailed},
	StateStarting:   {StateRunning, StateFailed},
	StateRunning:    {StateExited, StateKilled, StateTimedOut, StateLost},
	StateRecovering: {StateRunning, StateExited, StateKilled, StateTimedOut, StateLost, StateFailed},
}

// canMove tells whether the table allows a process in from to move to to.
func canMove(from, to State) bool { return slices.Contains(transitions[from], to) }

// moveLocked moves p to state to, if the table allows it. The caller
// holds p.mu, and does the move's side effects (closing started or done)
// only when it returns true.
//
// An illegal move is a bug of the registry, never of its caller: it is
// logged at error level and refused, leaving the process as it was. Not a
// panic: the supervisor holds every other process too, and a refused move
// keeps this one's state consistent with its channels, where a crash would
// leave every process unsupervised.
func (p *proc) moveLocked(to State) bool {
	if !canMove(p.state, to) {
		p.r.log.Error("registry: illegal state transition refused; this is a bug", "id", p.id, "from", p.state, "to", to)
		return false
	}
	p.state = to
	return true
}

// inLocked tells whether p is in state want, where a transition (what)
// begins; when not, the transition is refused as moveLocked refuses an
// illegal one. The caller holds p.mu.
func (p *proc) inLocked(want State, what string) bool {
	if p.state != want {
		p.r.log.Error("registry: transition from the wrong state refused; this is a bug", "id", p.id, "transition", what, "state", p.state, "want", want)
		return false
	}
	return true
}

// newProc makes a process in state (see transitions: starting for Start,
// recovering or final for Recover) with its channels and output buffer.
// The caller fills in the rest before anyone else sees it.
func (r *Registry) newProc(id string, opts StartOptions, createdAt time.Time, state State) *proc {
	p := &proc{r: r, id: id, backend: opts.Backend, opts: opts, createdAt: createdAt}
	p.started = make(chan struct{})
	p.done = make(chan struct{})
	p.treeDone = make(chan struct{})
	p.treeKick = make(chan struct{}, 1)
	p.killTurn = make(chan struct{}, 1)
	p.cond.L = &p.mu
	p.treeLive.Store(true)
	p.buf = newBuffer(r.cfg.BufferSize, r.cfg.HeadSize)
	p.moveLocked(state) // not shared yet: nobody else can hold mu
	return p
}

// running moves a started process to running, with the handle the
// environment e returned and its Ref (nil when not detached), and closes
// started. False: it was not starting (a bug, logged), and nothing
// changed.
func (p *proc) running(h env.Process, e env.Environment, ref *env.Ref, detached bool) bool {
	startedAt := time.Now()
	p.lastOutput.Store(time.Now().UnixNano())
	p.mu.Lock()
	if !p.inLocked(StateStarting, "running") {
		p.mu.Unlock()
		return false
	}
	p.moveLocked(StateRunning)
	p.startedAt, p.pid, p.handle, p.env, p.ref, p.detached = startedAt, h.PID(), h, e, ref, detached
	p.mu.Unlock()
	close(p.started)
	p.r.stateChanged()
	return true
}

// awaitConfirm makes a new process checkpointed as starting until
// confirm, even once it runs: Start's caller has not been answered yet.
func (p *proc) awaitConfirm() {
	p.mu.Lock()
	p.unconfirmed = true
	p.mu.Unlock()
}

// confirm records that Start's caller was answered: the process is no
// longer checkpointed as starting.
func (p *proc) confirm() {
	p.mu.Lock()
	p.unconfirmed = false
	p.mu.Unlock()
}

// reattached records the handle of a recovering process attached again
// (e its environment) and closes started. A process that ended while no
// supervisor ran stays recovering until its monitor records the end;
// another runs again. False: it was not recovering (a bug, logged), and
// nothing changed.
func (p *proc) reattached(h env.Process, e env.Environment, ended bool) bool {
	p.lastOutput.Store(time.Now().UnixNano())
	p.mu.Lock()
	if !p.inLocked(StateRecovering, "re-attach") {
		p.mu.Unlock()
		return false
	}
	if !ended {
		p.moveLocked(StateRunning)
	}
	p.handle, p.env, p.pid = h, e, h.PID()
	if p.startedAt.IsZero() {
		p.startedAt = time.Now()
	}
	p.mu.Unlock()
	close(p.started)
	p.r.stateChanged()
	return true
}

// setHandle records h, attached to a process restored finished whose
// tree is followed again.
func (p *proc) setHandle(h env.Process) {
	p.mu.Lock()
	p.handle = h
	p.mu.Unlock()
}

// keepHandle records h, attached on first use, unless a handle was
// attached concurrently: then h is released and that one returned.
func (p *proc) keepHandle(h env.Process) env.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.handle != nil {
		h.Release()
		return p.handle
	}
	p.handle = h
	return h
}

// leaveRecovering moves a re-attached process whose end its monitor has
// not recorded yet (a huge output, a slow sandbox) back to running, what
// it was before the restart: the monitor records the end later. It
// returns the state then.
func (p *proc) leaveRecovering() State {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == StateRecovering {
		p.moveLocked(StateRunning)
	}
	return p.state
}

// restoredState is the state a process is restored in from a record
// in state recorded: a final state stays; any other is recovering until
// the process is re-attached or settled.
func restoredState(recorded State) State {
	if recorded.Final() {
		return recorded
	}
	return StateRecovering
}

// restoreLife sets the lifecycle of a process restored from rec, before
// it is admitted.
func (p *proc) restoreLife(rec checkpointRecord) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !rec.State.Final() {
		p.recoverFrom = rec.State
	}
	p.startedAt, p.endedTime = rec.StartedAt, rec.EndedAt
	p.pid, p.status, p.reason = rec.PID, copyStatus(rec.Status), rec.Reason
	p.ref, p.detached = rec.Ref, rec.Detached
	p.failed.Store(rec.State == StateFailed)
}

// settle records a process restored in a final state as ended (its
// record's end time, or now) and closes started and done; it is called
// before the process is admitted.
func (p *proc) settle() {
	p.mu.Lock()
	if p.endedTime.IsZero() {
		p.endedTime = time.Now()
	}
	ended := p.endedTime
	p.mu.Unlock()
	p.endedAt.Store(ended.UnixNano())
	close(p.started)
	close(p.done)
}

// endUnrun records state, with reason and no exit status, for a process
// that has no monitor to record its end: a start that failed, and, at a
// recovery, an interrupted start, a lost process, a foreground run whose
// caller is gone. A process already ended is left as it was (a bug,
// logged).
func (p *proc) endUnrun(state State, reason string) {
	now := time.Now()
	p.mu.Lock()
	if !p.moveLocked(state) {
		p.mu.Unlock()
		return
	}
	p.reason, p.endedTime, p.status = reason, now, nil
	p.mu.Unlock()
	p.failed.Store(state == StateFailed)
	p.endedAt.Store(now.UnixNano())
	close(p.started)
	close(p.done)
	p.treeGone()
	p.r.stateChanged()
}

// end records how the leader ended, seen by its monitor: lost (the exit
// status is unknown; lost says why), killed or timed out when a signal of
// ours was delivered (the kill part's killReason), else exited with st.
// A signal of ours in flight is waited for first, so that a process we
// killed is never recorded as a plain exit. It closes done and returns
// the final Info; false when the process had ended already (a bug,
// logged).
func (p *proc) end(st env.ExitStatus, lost error) (Info, bool) {
	now := time.Now()
	p.mu.Lock()
	for p.signalling > 0 {
		p.cond.Wait()
	}
	to, status, reason := StateExited, &st, p.reason
	switch {
	case lost != nil:
		to, status, reason = StateLost, p.status, lost.Error()
	case p.killReason != "":
		to = p.killReason
		// Our signal explains the end: an OOM kill the backend saw in the
		// cgroup meanwhile is not called this process's.
		st.OOMKilled = false
	case st.OOMKilled:
		var sandbox *env.Limits
		if p.env != nil {
			sandbox = p.env.Capabilities().SandboxLimits
		}
		reason = outOfMemoryReason(p.opts.Limits, sandbox)
	}
	if !p.moveLocked(to) {
		p.mu.Unlock()
		return Info{}, false
	}
	p.status, p.reason, p.endedTime = status, reason, now
	p.reader = nil
	in := p.infoLocked()
	p.mu.Unlock()
	p.endedAt.Store(now.UnixNano())
	close(p.done)
	p.r.stateChanged()
	return in, true
}

// annotate sets the Reason of a process whose leader still runs: why it
// is about to be ended. keep: a reason already there stays.
func (p *proc) annotate(reason string, keep bool) {
	p.mu.Lock()
	if !p.state.Final() && (!keep || p.reason == "") {
		p.reason = reason
	}
	p.mu.Unlock()
}
