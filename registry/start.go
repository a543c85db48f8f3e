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
	"time"

	"github.com/corralhq/corral/env"
)

// Starting a process: Start and Run's shared start, recorded in the state
// file before anything runs, and what a failed start keeps of its error.

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
	p.confirm()
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

// checkCaps refuses, before anything is registered, what the backend says
// it cannot do: a readiness condition it cannot check (it would never
// hold), a limit it does not enforce (accepted and not enforced, it would
// let a runaway through). The backend is opened once for both; one that
// cannot be opened fails the start later, with its own error.
func (r *Registry) checkCaps(ctx context.Context, backend string, ready *ReadyOptions, limits *env.Limits) error {
	if ready == nil && limits == nil {
		return nil
	}
	e, err := r.environment(ctx, backend)
	if err != nil {
		return nil
	}
	if ready != nil {
		if err := checkReadyCaps(e, ready); err != nil {
			return fmt.Errorf("registry: start: %w", err)
		}
	}
	if limits != nil {
		if err := env.CheckLimits(backend, e.Capabilities(), *limits); err != nil {
			return fmt.Errorf("registry: start: %w", err)
		}
	}
	return nil
}

// startHow is what differs between Start and Run's starts.
type startHow struct {
	detach     bool               // where the backend can re-attach
	foreground bool               // a Run's caller waits for it (Info.Foreground)
	tee        io.Writer          // Run's live output
	started    func(Info)         // RunOptions.Started
	onInput    func(WaitingInput) // RunOptions.OnWaitingInput
	waiter     bool               // the caller waits for the end (Run): counted from registration on
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
	if opts.Limits != nil && !opts.Limits.IsZero() {
		opts.Limits = copyLimits(opts.Limits)
		spec.Limits = copyLimits(opts.Limits)
	} else {
		opts.Limits = nil
	}
	if err := opts.Runaway.Validate(); err != nil {
		return nil, err
	}
	opts.Runaway = copyRunaway(opts.Runaway)
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
	}
	if err := r.checkCaps(ctx, opts.Backend, opts.Ready, spec.Limits); err != nil {
		return nil, err
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
	p := r.newProc("", opts, time.Now(), StateStarting)
	p.watch, p.tee, p.onInput, p.ready = w, how.tee, how.onInput, rd
	p.foreground, p.envDigest = how.foreground, envDigest(opts.Env)
	if how.confirm {
		p.awaitConfirm()
	}
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

	if !p.running(h, e, ref, detached) {
		r.wg.Done()
		h.Release()
		return p, fmt.Errorf("registry: start %s: it was %s when it started (a bug of the registry)", p.id, p.info().State)
	}
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
