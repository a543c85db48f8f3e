package registry

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/env"
)

// Supervision: a proc is one tracked process. Start registers it and starts
// it on its environment; monitor copies its output into the buffer, feeds
// the watch patterns and records its end (finish).

// proc is one tracked process.
type proc struct {
	r         *Registry
	id        string
	backend   string
	opts      StartOptions // Labels cloned; never mutated
	createdAt time.Time
	admitted  uint64 // order of admission, set under r.mu: orders equal createdAt
	buf       *Buffer
	watch     *watcher // nil without patterns; used by the copier only
	// lazy is set for a process restored in a final state: its output is
	// still in the sandbox, read into buf on first need (loadOutput).
	lazy *lazyOutput
	// ready holds the readiness conditions; nil without them.
	ready *readiness
	// envDigest identifies opts.Env (see envDigest), which the state file
	// does not keep.
	envDigest string

	started  chan struct{} // closed once running or failed
	done     chan struct{} // closed once the final state is recorded
	treeDone chan struct{} // closed once done and nothing of the tree is left
	treeKick chan struct{} // (1) wakes followTree after a signal
	// replay: the handle's Output can be re-opened from any offset after
	// the exit, so what leftovers write can still be collected.
	replay bool

	lastOutput    atomic.Int64 // unix nanos of the last output (or start)
	endedAt       atomic.Int64 // unix nanos of the final state, 0 before
	finalSeen     atomic.Bool  // a caller received the final result
	treeLive      atomic.Bool  // the tree may still run: treeDone not closed
	waiters       atomic.Int32 // Waits and Runs blocked on the end; see enterWait
	watchDisabled atomic.Bool
	// ourSignal: a kill of ours signalled the tree, so its end is not a
	// crash.
	ourSignal atomic.Bool
	// failed: the final state is failed (read under r.mu, see
	// keyHolderLocked).
	failed atomic.Bool

	teeMu sync.Mutex
	tee   io.Writer // Run's live output; nil once Run returned

	// killTurn serialises kill procedures. A channel rather than a mutex,
	// so that a caller queued behind a long grace period gives up when
	// its context ends.
	killTurn chan struct{}

	mu         sync.Mutex
	cond       sync.Cond // on mu: signalling dropped to zero
	state      State
	startedAt  time.Time
	endedTime  time.Time
	pid        int
	status     *env.ExitStatus
	reason     string
	timedOut   string
	ref        *env.Ref
	detached   bool
	foreground bool // immutable: started by Run without YieldAfter
	handle     env.Process
	env        env.Environment // handle's, for envGone; set with handle
	reader     io.ReadCloser
	killReason State // StateKilled or StateTimedOut once our signal was delivered
	signalling int   // our signals in flight
	leftover   int   // processes of the tree alive after the leader exited
	readyAt    time.Time
	pending    *pendingKill // a kill the backend did not answer (kill.go)
	// unconfirmed: a Start whose caller has not been answered yet; it is
	// checkpointed as starting (see recordLocked).
	unconfirmed bool
	// recoverFrom is the recorded state of a process in StateRecovering.
	recoverFrom State
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
		TTL:         p.opts.TTL,
		ExpiresAt:   p.expiresAtLocked(),
		IdleTimeout: p.opts.IdleTimeout,
		KillPending: p.pending != nil,
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

// Start starts a background process and returns once it runs. It is
// started detached (it survives the supervisor) when the backend supports
// re-attach and no PTY is asked for.
//
// An invalid option or a full registry returns an error and registers
// nothing. A process the backend could not start is registered in state
// failed (Reason says why) and its Info is returned with the error.
//
// A named Start (StartOptions.Name) whose name a process with a running
// tree holds returns that process, with Info.Reused set, when it runs the
// same command (backend, command, directory, environment); otherwise it
// fails with ErrNameInUse, or with Replace kills the holder's tree and
// starts anew. Concurrent Starts of one name start one process.
//
// With Config.StateFile, the process is in the state file before anything
// runs, and Start returns only once the file records it running: a
// supervisor that dies during a Start leaves a record from which the next
// one (Recover) ends whatever that start left running, so a caller whose
// Start failed finds nothing of it running. A state file that cannot be
// written refuses the start, with nothing left running.
func (r *Registry) Start(ctx context.Context, opts StartOptions) (Info, error) {
	var reused bool
	p, err := r.start(ctx, opts, startHow{detach: true, reused: &reused, confirm: true})
	if p == nil {
		return Info{}, err
	}
	if reused {
		in := p.info()
		in.Reused = true
		return in, nil
	}
	if err != nil {
		return p.info(), err
	}
	p.mu.Lock()
	p.unconfirmed = false
	p.mu.Unlock()
	if err := r.checkpointSync(); err != nil {
		// The process runs, but a crash would leave it without a
		// record: it must not outlive this failure.
		return Info{}, r.unrecorded(ctx, p, err)
	}
	return p.info(), nil
}

// unrecordedKillTimeout bounds the kill of a process whose start could not
// be recorded.
const unrecordedKillTimeout = 15 * time.Second

// unrecorded ends a started process whose record could not be written,
// forgets it, and returns the start's error.
func (r *Registry) unrecorded(ctx context.Context, p *proc, cause error) error {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unrecordedKillTimeout)
	defer cancel()
	if _, err := p.kill(kctx, killPlan{sig: env.SIGKILL, escalate: true, reason: StateKilled}); err != nil {
		r.log.Error("start: a process that could not be recorded in the state file may still run", "id", p.id, "err", err)
	}
	r.forget(p)
	return r.stateFileError(cause)
}

// stateFileError is the error of a start refused because the state file
// cannot be written.
func (r *Registry) stateFileError(cause error) error {
	why := cause
	var pe *fs.PathError
	if errors.As(cause, &pe) {
		why = pe.Err // the path is said once, below
	}
	return &StateFileError{Path: r.cfg.StateFile, Err: why}
}

// forget drops p from the tracked processes.
func (r *Registry) forget(p *proc) {
	r.mu.Lock()
	if r.procs[p.id] == p {
		delete(r.procs, p.id)
	}
	r.mu.Unlock()
	r.stateChanged()
}

// startHow is what differs between Start and Run's starts.
type startHow struct {
	detach     bool       // where the backend can re-attach
	foreground bool       // a Run's caller waits for it (Info.Foreground)
	tee        io.Writer  // Run's live output
	started    func(Info) // RunOptions.Started
	waiter     bool       // the caller waits for the end (Run): counted from registration on
	// reused, when non-nil, lets a named start return the process that
	// holds the name and runs the same command (set to true then).
	reused *bool
	// confirm: the process is checkpointed as starting until the caller
	// confirms it (Start, once the final checkpoint is written).
	confirm bool
}

func (r *Registry) start(ctx context.Context, opts StartOptions, how startHow) (*proc, error) {
	if opts.Backend == "" {
		opts.Backend = r.cfg.DefaultBackend
	}
	spec := env.Spec{Command: opts.Command, Dir: opts.Dir, Env: slices.Clone(opts.Env), Environ: slices.Clone(opts.Environ), PTY: opts.PTY, Stdin: opts.Stdin}
	// The caller's environment goes to the backend only: a process record
	// holds no environment (see StartOptions.Environ).
	opts.Environ = nil
	if opts.Session != "" && !ValidSessionID(opts.Session) {
		return nil, fmt.Errorf("%w: session %q: %s", ErrInvalidOptions, clip(opts.Session, 64), sessionIDForm)
	}
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("registry: start: %w", err)
	}
	for k := range opts.Labels {
		if k == "" {
			return nil, fmt.Errorf("%w: empty label key", ErrInvalidOptions)
		}
	}
	w, err := newWatcher(opts.Watch, opts.WatchRegex)
	if err != nil {
		return nil, err
	}
	if err := validateDevOptions(opts); err != nil {
		return nil, err
	}
	if how.reused == nil {
		opts.Key = "" // Run's: see StartOptions.Key
	} else if opts.Key != "" && !ValidKey(opts.Key) {
		return nil, fmt.Errorf("%w: key %q: must match [A-Za-z0-9_.-]{1,64}", ErrInvalidOptions, truncate(opts.Key, 80))
	}
	rd, err := validateReady(opts.Ready)
	if err != nil {
		return nil, err
	}
	if opts.Ready != nil {
		ro := *opts.Ready
		opts.Ready = &ro
		// Refused before anything is registered: a condition the backend
		// cannot check would never hold.
		if e, err := r.environment(ctx, opts.Backend); err == nil {
			if err := checkReadyCaps(e, opts.Ready); err != nil {
				return nil, fmt.Errorf("registry: start: %w", err)
			}
		}
	}
	opts.Labels = maps.Clone(opts.Labels)
	opts.Env = spec.Env
	// The spec runs the whole command; the record keeps at most
	// MaxRecordedCommand of it.
	opts.Command = recordedCommand(opts.Command)
	opts.Watch = slices.Clone(opts.Watch)
	opts.WatchRegex = slices.Clone(opts.WatchRegex)
	if opts.PTY != nil {
		sz := *opts.PTY
		opts.PTY = &sz
		spec.PTY = &sz
	}
	now := time.Now()
	p := &proc{
		r:           r,
		backend:     opts.Backend,
		opts:        opts,
		createdAt:   now,
		buf:         NewBuffer(r.cfg.BufferSize, r.cfg.HeadSize),
		watch:       w,
		started:     make(chan struct{}),
		done:        make(chan struct{}),
		treeDone:    make(chan struct{}),
		treeKick:    make(chan struct{}, 1),
		killTurn:    make(chan struct{}, 1),
		state:       StateStarting,
		tee:         how.tee,
		foreground:  how.foreground,
		ready:       rd,
		envDigest:   envDigest(opts.Env),
		unconfirmed: how.confirm,
	}
	p.cond.L = &p.mu
	p.treeLive.Store(true)
	holder, err := r.registerNamed(ctx, p, how.reused != nil)
	if err != nil {
		return nil, err
	}
	if holder != nil {
		*how.reused = true
		return holder, nil
	}
	// The record first: the process is tagged with its ID (spec.Tag), so
	// a supervisor that dies while the environment starts it leaves
	// the next one an ID to look for (see recover.go).
	if err := r.checkpointSync(); err != nil {
		p.fail(err)
		r.forget(p)
		return nil, r.stateFileError(err)
	}
	if how.waiter {
		// Counted before anything can end the process: its completion
		// must find the waiter (see exitedEvent).
		p.enterWait()
	}
	spec.Tag = p.id

	e, h, detached, err := r.startOn(ctx, p, opts.Backend, spec, how.detach)
	if err != nil {
		err = shortError(err)
		p.fail(err)
		return p, err
	}
	spec.Detach = detached
	var ref *env.Ref
	if spec.Detach {
		if rf, err := h.Ref(); err == nil {
			ref = &rf
		}
	}

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		// Close already ran or is running; the environment is or will be
		// closed, which ends a process that was not detached.
		h.Release()
		err := fmt.Errorf("registry: start %s: %w", p.id, ErrClosed)
		p.fail(err)
		return p, err
	}
	r.wg.Add(1)
	r.mu.Unlock()

	startedAt := time.Now()
	p.lastOutput.Store(time.Now().UnixNano())
	p.mu.Lock()
	p.state, p.startedAt, p.pid, p.handle, p.env, p.ref, p.detached = StateRunning, startedAt, h.PID(), h, e, ref, detached
	p.mu.Unlock()
	close(p.started)
	r.stateChanged()
	r.log.Debug("started", "id", p.id, "backend", opts.Backend, "pid", h.PID(), "detached", spec.Detach)
	if _, tagged := e.(env.TagFinder); how.foreground && !tagged {
		// The state file holds the process (and its Ref) before its ID or
		// any of its output reaches the caller: a supervisor that crashes
		// after that leaves a process the next one re-attaches and, its
		// caller being gone, kills; never an orphan nobody knows of. Where
		// the environment finds processes by tag, the record made before
		// the start is enough: the next one ends a foreground process
		// found by its tag as it ends one re-attached (see sweep.go), and
		// a run pays one synchronous write, not two.
		if err := r.checkpointSync(); err != nil {
			r.log.Error("run: the state file does not record the process; a crash now would leave it to the tag sweep of the next supervisor", "id", p.id, "err", err)
		}
	}
	if how.started != nil {
		// Before the copier starts: no output reaches the tee before it.
		how.started(p.info())
	}
	go p.monitor()
	p.armReady(h, e)
	p.armDeadlines()
	r.ev.publish(Event{Type: EventStarted, ID: p.id, Command: opts.Command, State: StateRunning,
		Summary: fmt.Sprintf("%s started: %s", p.label(), clip(opts.Command, 200))})
	return p, nil
}

// startOn starts spec on target's environment. A sandbox found gone on
// the way (removed since its environment was opened) is opened again, once
// (see envGone): a docker-image:// target gets a fresh sandbox. It sets
// p.replay, and says whether it started the process detached (when detach
// is asked for and the environment can re-attach).
func (r *Registry) startOn(ctx context.Context, p *proc, target string, spec env.Spec, detach bool) (env.Environment, env.Process, bool, error) {
	for attempt := 0; ; attempt++ {
		e, err := r.environment(ctx, target)
		if err != nil {
			return nil, nil, false, err
		}
		caps := e.Capabilities()
		s := spec
		s.Detach = detach && caps.Reattach && (spec.PTY == nil || caps.ReattachPTY)
		h, err := e.Start(ctx, s)
		if err == nil {
			p.replay = caps.ReplayOutput || s.Detach
			return e, h, s.Detach, nil
		}
		if !r.envGone(target, e, err) || attempt > 0 {
			return nil, nil, false, fmt.Errorf("registry: start %s on %q: %w", p.id, target, err)
		}
		r.log.Info("start found the sandbox gone; opening the target again", "id", p.id, "target", target)
	}
}

// MaxRecordedCommand is the most of a command the registry records (Info,
// events, the state file): a longer one (an agent's heredoc may be
// megabytes) runs whole, but is recorded as its head, its length and a
// digest that tells it from any other (recordedCommand). One failed or
// running 7 MiB command then costs the registry, its listings and its
// state file a few KiB, not its size several times over.
const MaxRecordedCommand = 4 << 10

// recordedCommand is command as the registry records it: itself when at
// most MaxRecordedCommand long, else its head (cut on a rune boundary),
// "…", and "[N bytes, sha256 HEX]" over the whole.
func recordedCommand(command string) string {
	if len(command) <= MaxRecordedCommand {
		return command
	}
	sum := sha256.Sum256([]byte(command))
	tail := fmt.Sprintf(" [%d bytes, sha256 %x]", len(command), sum[:16])
	return clip(command, MaxRecordedCommand-len(tail)-len("…")) + tail
}

// maxErrorBytes bounds an error the registry records or returns: one that
// is longer (a backend that repeats a huge input) is cut.
const maxErrorBytes = 1 << 10

// shortError returns err, or when its message is over maxErrorBytes, an
// error that wraps it (errors.Is and As still see it) with the message
// cut.
func shortError(err error) error {
	if err == nil || len(err.Error()) <= maxErrorBytes {
		return err
	}
	return &clippedError{msg: clip(err.Error(), maxErrorBytes), err: err}
}

type clippedError struct {
	msg string
	err error
}

func (e *clippedError) Error() string { return e.msg }
func (e *clippedError) Unwrap() error { return e.err }

// fail records that the process could not be started.
func (p *proc) fail(err error) {
	p.endUnrun(StateFailed, err.Error())
	p.r.log.Debug("start failed", "id", p.id, "err", err)
}

// endUnrun records state, with reason and no exit status, for a process
// that has no monitor to record its end: a start that failed, and, at a
// recovery, an interrupted start, a lost process, a foreground run whose
// caller is gone.
func (p *proc) endUnrun(state State, reason string) {
	now := time.Now()
	p.mu.Lock()
	p.state, p.reason, p.endedTime, p.status = state, reason, now, nil
	p.mu.Unlock()
	p.failed.Store(state == StateFailed)
	p.endedAt.Store(now.UnixNano())
	close(p.started)
	close(p.done)
	p.treeGone()
	p.r.stateChanged()
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
		p.mu.Lock()
		p.reader = rd
		p.mu.Unlock()
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
	p.tee = nil
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
	now := time.Now()
	p.mu.Lock()
	// A signal of ours may be in flight: wait for its outcome so that a
	// process we killed is never recorded as a plain exit.
	for p.signalling > 0 {
		p.cond.Wait()
	}
	switch {
	case lost != nil:
		p.state, p.reason = StateLost, lost.Error()
	case p.killReason != "":
		p.state = p.killReason
		// Our signal explains the end: an OOM kill the backend saw in the
		// cgroup meanwhile is not called this process's.
		st.OOMKilled = false
		p.status = &st
	default:
		p.state = StateExited
		p.status = &st
		if st.OOMKilled {
			p.reason = ReasonOutOfMemory
		}
	}
	p.endedTime = now
	p.reader = nil
	in := p.infoLocked()
	p.mu.Unlock()
	p.endedAt.Store(now.UnixNano())
	close(p.done)
	p.r.stateChanged()
	p.r.log.Debug("finished", "id", p.id, "state", in.State, "status", in.Status)

	if in.Reason == ReasonOutOfMemory && in.State == StateExited {
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
		Summary: fmt.Sprintf("%s ran out of memory: the kernel's OOM killer ended it (%s); raise its memory limit or make it use less: %s",
			p.label(), how, clip(p.opts.Command, 200))}
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

// validateDevOptions checks the dev-server options of StartOptions.
func validateDevOptions(opts StartOptions) error {
	if opts.Name != "" {
		if err := ValidateName(opts.Name); err != nil {
			return err
		}
	} else if opts.Replace {
		return fmt.Errorf("%w: replace needs a name: it replaces the process holding that name", ErrInvalidOptions)
	}
	if opts.TTL < 0 || opts.IdleTimeout < 0 {
		return fmt.Errorf("%w: negative TTL or idle timeout", ErrInvalidOptions)
	}
	return nil
}
