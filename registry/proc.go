package registry

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/env"
)

// Supervision: a proc is one tracked process. Start (start.go) registers
// it and starts it on its environment; monitor copies its output into the
// buffer, feeds the watch patterns and records its end (finish).

// proc is one tracked process: who it is, and its state in five parts,
// each a small type below that says what guards it. One mutex, mu, guards
// the plain fields of every part: they change together (at the end, the
// kill part decides the lifecycle's final state), and one lock cannot be
// taken in the wrong order. The state moves only through the transitions
// of lifecycle.go.
type proc struct {
	r         *Registry
	id        string
	backend   string
	opts      StartOptions // Labels cloned; never mutated
	createdAt time.Time
	admitted  uint64 // order of admission, set under r.mu: orders equal createdAt
	// envDigest identifies opts.Env (see envDigest), which the state file
	// does not keep.
	envDigest  string
	foreground bool // immutable: started by Run without YieldAfter

	mu sync.Mutex // guards the plain fields of the parts
	procLife
	procKill
	procTree
	procOutput
	procReady
	// stats is what the sampler measured of the tree (stats.go); it has
	// its own lock, taken inside mu and never around it.
	stats procStats
	input inputState // inputwait.go
}

// procLife is where the process is in its life (lifecycle.go). Its plain
// fields are guarded by proc.mu and change only in lifecycle.go, whose
// transitions also close the channels (once) and set endedAt and failed.
// The atomics are read without the lock; finalSeen and waiters are set by
// whoever delivers the final result (events.go, wait.go, run.go).
type procLife struct {
	state State
	// recoverFrom is the recorded state of a process in StateRecovering.
	recoverFrom State
	// unconfirmed: a Start whose caller has not been answered yet; it is
	// checkpointed as starting (see recordLocked).
	unconfirmed bool
	startedAt   time.Time
	endedTime   time.Time
	pid         int
	status      *env.ExitStatus
	reason      string
	ref         *env.Ref
	detached    bool
	handle      env.Process
	env         env.Environment // handle's, for envGone; set with handle

	started chan struct{} // closed once running or failed
	done    chan struct{} // closed once the final state is recorded

	endedAt   atomic.Int64 // unix nanos of the final state, 0 before
	finalSeen atomic.Bool  // a caller received the final result
	waiters   atomic.Int32 // Waits and Runs blocked on the end; see enterWait
	// failed: the final state is failed (read under r.mu, see
	// keyHolderLocked).
	failed atomic.Bool
}

// procKill is the state of the kills of the process (kill.go). Its plain
// fields are guarded by proc.mu.
type procKill struct {
	// killTurn serialises kill procedures. A channel rather than a mutex,
	// so that a caller queued behind a long grace period gives up when
	// its context ends.
	killTurn   chan struct{}
	cond       sync.Cond // on proc.mu: signalling dropped to zero
	signalling int       // our signals in flight
	killReason State     // StateKilled or StateTimedOut once our signal was delivered
	timedOut   string    // with killReason StateTimedOut: which timeout
	pending    *pendingKill
	// ourSignal: a kill of ours signalled the tree, so its end is not a
	// crash.
	ourSignal atomic.Bool
}

// procTree is what is known of the process's tree after its leader exited
// (tree.go). leftover is guarded by proc.mu.
type procTree struct {
	treeDone chan struct{} // closed once done and nothing of the tree is left
	treeKick chan struct{} // (1) wakes followTree after a signal
	treeLive atomic.Bool   // the tree may still run: treeDone not closed
	leftover int           // processes of the tree alive after the leader exited
}

// procOutput is the process's output and what reads it. buf, watch and
// lazy are set at creation; reader is guarded by proc.mu, tee by teeMu.
type procOutput struct {
	buf   *buffer
	watch *watcher // nil without patterns; used by the copier only
	// lazy is set for a process restored in a final state: its output is
	// still in the sandbox, read into buf on first need (loadOutput).
	lazy *lazyOutput
	// replay: the handle's Output can be re-opened from any offset after
	// the exit, so what leftovers write can still be collected. Set before
	// the monitor starts.
	replay        bool
	reader        io.ReadCloser
	lastOutput    atomic.Int64 // unix nanos of the last output (or start)
	watchDisabled atomic.Bool

	teeMu sync.Mutex
	tee   io.Writer // Run's live output; nil once Run returned
	// onInput is Run's RunOptions.OnWaitingInput; nil once Run returned.
	onInput func(WaitingInput)
}

// procReady is the process's readiness (ready.go). readyAt is guarded by
// proc.mu.
type procReady struct {
	ready   *readiness // the conditions; nil without them
	readyAt time.Time
}

// The accessors below take proc.mu for the files that read one field of a
// part, or set one outside the lifecycle. procLife is changed in
// lifecycle.go only, the kill part in kill.go.

// currentHandle is the process's handle; nil before it started, and for
// a process restored finished that nothing attached yet.
func (p *proc) currentHandle() env.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.handle
}

// handleAndRef is the handle and the Ref (nil when not detached).
func (p *proc) handleAndRef() (env.Process, *env.Ref) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.handle, p.ref
}

// stateAndHandle is the state and the handle, read together.
func (p *proc) stateAndHandle() (State, env.Process) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state, p.handle
}

// startedTime is when the process started (zero before).
func (p *proc) startedTime() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.startedAt
}

// expiresAt is when the TTL ends the process; zero without one.
func (p *proc) expiresAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.expiresAtLocked()
}

// setReader records the monitor's output stream, for closeReader.
func (p *proc) setReader(rd io.ReadCloser) {
	p.mu.Lock()
	p.reader = rd
	p.mu.Unlock()
}

// markReady records when the readiness conditions first all held.
func (p *proc) markReady(now time.Time) {
	p.mu.Lock()
	if p.readyAt.IsZero() {
		p.readyAt = now
	}
	p.mu.Unlock()
}

// setLeftover records n leftover processes and reports a change.
func (p *proc) setLeftover(n int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	changed := p.leftover != n
	p.leftover = n
	return changed
}

// record is the process as the state file keeps it.
func (p *proc) record() checkpointRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.recordLocked()
}

// infoWithRef is info, with the Ref when withRef, without the backend's
// condition.
func (p *proc) infoWithRef(withRef bool) Info {
	p.mu.Lock()
	defer p.mu.Unlock()
	in := p.infoLocked()
	if withRef && p.ref != nil {
		ref := *p.ref
		in.Ref = &ref
	}
	return in
}

func (p *proc) info() Info {
	p.mu.Lock()
	in := p.infoLocked()
	p.mu.Unlock()
	p.r.setCondition(&in)
	return in
}

func (p *proc) infoLocked() Info {
	in := Info{
		ID:             p.id,
		Backend:        p.backend,
		Command:        p.opts.Command,
		Dir:            p.opts.Dir,
		Labels:         maps.Clone(p.opts.Labels),
		State:          p.state,
		PID:            p.pid,
		PTY:            p.opts.PTY != nil,
		Stdin:          p.opts.Stdin,
		Limits:         copyLimits(p.opts.Limits),
		RunawayOptions: copyRunaway(p.opts.Runaway),
		Detached:       p.detached,
		Foreground:     p.foreground,
		Notify:         p.opts.Notify,
		CreatedAt:      p.createdAt,
		StartedAt:      p.startedAt,
		EndedAt:        p.endedTime,
		OutputBytes:    p.outputBytes(),
		Reason:         p.reason,
		Session:        p.opts.Session,
		TimedOut:       p.timedOut,
		WatchDisabled:  p.watchDisabled.Load(),
		Leftover:       p.leftover,
		ResultReported: p.finalSeen.Load(),
		// What is known to run: a tree not looked at yet since the
		// leader's exit (microseconds on most backends) counts as gone
		// here; decisions that must not be wrong look (liveTree).
		TreeRunning: !p.state.Final() || p.leftover > 0,
		Name:        p.opts.Name,
		ReadyAt:     p.readyAt,
		TTL:         Duration(p.opts.TTL),
		ExpiresAt:   p.expiresAtLocked(),
		IdleTimeout: Duration(p.opts.IdleTimeout),
		KillPending: p.pending != nil,
	}
	in.Stats = p.stats.current(in.TreeRunning)
	in.Runaway = in.TreeRunning && p.stats.isRunaway()
	if p.state == StateRunning {
		in.WaitingInput = p.input.current()
	}
	if p.opts.IdleTimeout > 0 && p.state == StateRunning {
		in.IdleExpiresAt = time.Unix(0, p.lastOutput.Load()).Add(p.opts.IdleTimeout)
	}
	if p.ready != nil {
		ro := p.ready.opts
		in.Ready = &ro
	}
	if p.status != nil {
		st := *p.status
		in.Status = &st
	}
	return in
}

// outputBytes is the size of the output: what the buffer received, or for
// a process restored in a final state whose output was not read back yet,
// what the checkpoint recorded.
func (p *proc) outputBytes() int64 {
	n := p.buf.Total()
	if p.lazy != nil {
		n = max(n, p.lazy.bytes)
	}
	return n
}

func (p *proc) closeReader() {
	p.mu.Lock()
	rd := p.reader
	p.mu.Unlock()
	if rd != nil {
		rd.Close()
	}
}

// fail records that the process could not be started.
func (p *proc) fail(err error) {
	p.endUnrun(StateFailed, err.Error())
	p.r.log.Debug("start failed", "id", p.id, "err", err)
}

// monitor is the process's one goroutine: it copies the output into the
// buffer (and Run's writer, and the watcher) until the stream ends, then
// records how the process ended. Recording only after the stream ended
// means a final state always comes with all of the output.
func (p *proc) monitor() {
	defer p.r.wg.Done()
	ctx := p.r.ctx
	h := p.handle // set before monitor starts, never changed
	var lost error
	rd, err := h.Output(ctx, 0)
	if err == nil {
		p.setReader(rd)
		if ctx.Err() != nil {
			// Close cancelled the context before it could see the reader
			// and close it; do so here so that the read cannot block.
			rd.Close()
		}
		err = p.copyOutput(rd)
		rd.Close()
	}
	if err != nil && ctx.Err() == nil {
		p.r.log.Warn("output stream failed", "id", p.id, "err", err)
		if errors.Is(err, env.ErrSandboxGone) || errors.Is(err, env.ErrNotFound) {
			lost = err
		}
	}
	if p.watch != nil {
		p.publishHits(p.watch.feed(nil, time.Now, true))
	}
	var st env.ExitStatus
	if lost == nil {
		st, err = h.Wait(ctx)
		if ctx.Err() != nil {
			return // the registry is closing
		}
		if err != nil {
			lost = err
		}
	}
	if lost != nil {
		// Before the lost state shows: whoever sees it finds the target
		// gone (doctor) and opens a fresh one on the next call.
		p.r.envGone(p.backend, p.env, lost)
	}
	p.finish(st, lost)
	if lost != nil {
		p.treeEnded()
		return
	}
	p.followTree(ctx, h)
}

func (p *proc) copyOutput(rd io.Reader) error {
	// Start small so that thousands of idle processes stay cheap; grow
	// while the stream keeps filling the buffer.
	buf := make([]byte, 4<<10)
	for {
		n, err := rd.Read(buf)
		if n > 0 {
			p.ingest(buf[:n])
			if n == len(buf) && len(buf) < 128<<10 {
				buf = make([]byte, 2*len(buf))
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (p *proc) ingest(b []byte) {
	p.buf.Write(b)
	p.lastOutput.Store(time.Now().UnixNano())
	p.input.clear(false)
	p.teeMu.Lock()
	if p.tee != nil {
		if _, err := p.tee.Write(b); err != nil {
			p.r.log.Debug("live output writer failed; streaming stopped", "id", p.id, "err", err)
			p.tee = nil
		}
	}
	p.teeMu.Unlock()
	if p.watch != nil {
		p.publishHits(p.watch.feed(b, time.Now, false))
	}
	if p.ready != nil {
		p.feedReady(b)
	}
}

func (p *proc) detachTee() {
	p.teeMu.Lock()
	p.tee, p.onInput = nil, nil
	p.teeMu.Unlock()
}

func (p *proc) publishHits(hits []watchHit) {
	for _, h := range hits {
		ev := Event{Type: h.typ, ID: p.id, Command: p.opts.Command, Pattern: h.pattern, Line: h.line, State: StateRunning}
		switch h.typ {
		case EventWatchMatch:
			ev.Summary = fmt.Sprintf("%s matched %q: %s", p.id, h.pattern, h.line)
		case EventWatchDisabled:
			p.watchDisabled.Store(true)
			ev.Notify = true
			ev.Summary = fmt.Sprintf("%s: watch patterns matched too often and were disabled; one event will follow when it exits", p.id)
		}
		p.r.ev.publish(ev)
	}
}

// finish records the final state. lost, when non-nil, says why the exit
// status is unknown.
func (p *proc) finish(st env.ExitStatus, lost error) {
	in, ok := p.end(st, lost)
	if !ok {
		return
	}
	p.r.log.Debug("finished", "id", p.id, "state", in.State, "status", in.Status)

	if IsOutOfMemory(in.Reason) && in.State == StateExited {
		p.r.ev.publish(p.oomKilledEvent(in))
	}
	p.r.ev.publish(p.exitedEvent(in))
}

// oomKilledEvent is the event of a process the kernel's OOM killer ended.
func (p *proc) oomKilledEvent(in Info) Event {
	how := *in.Status
	how.OOMKilled = false // said in words already
	return Event{Type: EventOOMKilled, ID: p.id, Command: p.opts.Command, State: in.State, Status: in.Status, Notify: true,
		Tail: outputTail(p.buf, MaxEventTail),
		Summary: fmt.Sprintf("%s ran %s: the kernel's OOM killer ended it (%s); raise its memory limit or make it use less: %s",
			p.label(), in.Reason, how, clip(p.opts.Command, 200))}
}

func copyStatus(s *env.ExitStatus) *env.ExitStatus {
	if s == nil {
		return nil
	}
	c := *s
	return &c
}

// treeEnded records that the tree is gone, seen by the process's own
// watch (not at a restore), and publishes a crashed event when a ready
// process's tree ended on its own.
//
// The event is published before treeDone closes, so that whoever waits
// for the tree finds it published.
func (p *proc) treeEnded() {
	if rd := p.ready; rd != nil {
		rd.stop()
		if p.treeLive.Load() && rd.isReady() && !p.ourSignal.Load() {
			p.r.ev.publish(p.crashedEvent())
		}
	}
	p.treeGone()
}

// crashedEvent is the event of a ready process whose tree ended on its own.
func (p *proc) crashedEvent() Event {
	in := p.info()
	ev := Event{Type: EventCrashed, ID: p.id, Command: p.opts.Command, State: in.State, Status: in.Status, Notify: true,
		Tail: outputTail(p.buf, MaxEventTail)}
	how := string(in.State)
	if in.Status != nil {
		how = fmt.Sprintf("%s (%s)", in.State, in.Status)
	} else if in.Reason != "" {
		how = fmt.Sprintf("%s: %s", in.State, in.Reason)
	}
	ev.Summary = fmt.Sprintf("%s crashed after it was ready: %s: %s", p.label(), how, clip(p.opts.Command, 200))
	return ev
}

func copyLimits(l *env.Limits) *env.Limits {
	if l == nil {
		return nil
	}
	c := *l
	return &c
}
