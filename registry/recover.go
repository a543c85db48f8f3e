package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/backoff"
)

// recoverRefillTimeout bounds how long the recovery waits for a
// re-attached process that finished while no supervisor ran to have its
// output read back and its end recorded.
const recoverRefillTimeout = 30 * time.Second

// recoverParallel bounds concurrent Attach calls during a recovery. Only
// the Attach holds a slot: what follows it (reading back the output of a
// process that ended meanwhile) waits without one, so a slow process
// never holds up the others.
const recoverParallel = 64

// RecoverReport says what Recover found in the state file.
type RecoverReport struct {
	// Path is the state file read.
	Path string `json:"path"`
	// Restored counts the processes tracked again, by the state they
	// were restored in (running: re-attached; exited, killed, …: ended
	// earlier or while no supervisor ran; lost: could not be re-attached;
	// failed: a start that was never confirmed, see Interrupted).
	Restored map[State]int `json:"restored,omitempty"`
	// Recovering counts the processes still being re-attached when the
	// report was made (see StartRecover); they are not in Restored yet.
	Recovering int `json:"recovering,omitempty"`
	// Interrupted counts the starts the previous registry never
	// confirmed to their callers (it died during them): what they left
	// running was ended, and they are restored failed.
	Interrupted int `json:"interrupted,omitempty"`
	// Skipped counts records that were malformed and ignored.
	Skipped int `json:"skipped,omitempty"`
	// SetAside is where a corrupt state file was moved ("" when none).
	SetAside string `json:"set_aside,omitempty"`
	// Notice describes a problem for the user (a corrupt file set aside),
	// "" when all went well.
	Notice string `json:"notice,omitempty"`
}

// Recovery is a recovery under way: StartRecover returned, and processes
// are re-attached in the background.
type Recovery struct {
	done chan struct{}

	mu  sync.Mutex
	rep RecoverReport
}

// Done is closed once every process of the state file is re-attached or
// settled (Report then has Recovering 0).
func (rc *Recovery) Done() <-chan struct{} { return rc.done }

// Report returns what the recovery found so far.
func (rc *Recovery) Report() RecoverReport {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rep := rc.rep
	rep.Restored = maps.Clone(rc.rep.Restored)
	return rep
}

// Wait waits until the recovery is done, or ctx is, and returns the
// report (with ctx's error when ctx ended first).
func (rc *Recovery) Wait(ctx context.Context) (RecoverReport, error) {
	select {
	case <-rc.done:
		return rc.Report(), nil
	case <-ctx.Done():
		return rc.Report(), fmt.Errorf("registry: recover: %w", ctx.Err())
	}
}

// settled moves one process from Recovering to Restored.
func (rc *Recovery) settled(st State, interrupted bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.rep.Recovering--
	rc.rep.Restored[st]++
	if interrupted {
		rc.rep.Interrupted++
	}
}

// Recover reads Config.StateFile and tracks its processes again, under
// their old IDs, and returns once every one is re-attached or settled. It
// is StartRecover followed by Recovery.Wait; see StartRecover.
func (r *Registry) Recover(ctx context.Context) (RecoverReport, error) {
	rc, err := r.StartRecover(ctx)
	if err != nil {
		return rc.Report(), err
	}
	return rc.Wait(ctx)
}

// StartRecover reads Config.StateFile and tracks its processes again,
// under their old IDs. Call it (or Recover) once, right after New and
// before anything else; the registry writes no checkpoint before, so a
// state file is never overwritten unread.
//
// It returns once the file is read and every process is tracked: a
// supervisor can serve at once. What needs the sandbox continues in the
// background, under ctx (which bounds the whole recovery) and at most
// recoverParallel Attach calls at a time; the processes it concerns are
// in StateRecovering meanwhile, showing what the file recorded, and Kill,
// Wait and Write wait for them.
//
//   - A process that was running and can be re-attached (it has an
//     env.Ref) is attached with Environment.Attach and continues: its
//     output is read again from byte 0, which refills the buffer with no
//     gap and no duplicate, and Wait reports its real exit status, also
//     when it ended while no supervisor ran. A kill whose signal was
//     delivered before the crash still makes it killed. When the handle
//     knows at once that the process ended (a Wait on a done context
//     answers: env/local and the env/nohup sandboxes read the exit at
//     Attach), it stays recovering until its output is read back and its
//     end recorded; otherwise it is running, and its monitor records an
//     end it finds.
//   - A process that had already finished keeps its recorded state,
//     status, timestamps and output size, and nothing of it is read from
//     the sandbox: not its output, and the process is not even attached.
//     Its output is read back on first need (Poll from an offset before
//     its end, Log), once; Get, List and Wait never read it. One whose
//     leader had left part of its tree running is attached, its output
//     read back in the background and its tree followed again.
//   - A start the previous registry never confirmed to its caller (the
//     record says starting: it died during Start) is interrupted: what it
//     left running is found — through its Ref, or by its ID, the Spec.Tag
//     it was started with, where the environment is an env.TagFinder —
//     and killed with its whole tree, and its state in the sandbox
//     removed; the process is restored failed, its Reason saying so. A
//     process recorded running without a Ref (not detached) is looked for
//     and killed the same way, and restored lost: nobody could re-attach
//     it.
//   - A process whose sandbox or state is gone (env.ErrSandboxGone,
//     env.ErrNotFound), that cannot be attached for another reason, or
//     that was not detached (a PTY) becomes lost, with the reason. A
//     backend that is only unavailable for now (env.ErrUnavailable: a
//     paused container, a host reconnecting) is asked again, with
//     backoff, until ctx ends: its processes stay recovering meanwhile,
//     and the others of the file are not held up.
//
// A state file that cannot be parsed is renamed to
// "<StateFile>.corrupt-<UTC timestamp>", logged, and reported in
// RecoverReport.Notice; the registry then starts empty. Only errors that
// make checkpointing itself impossible are returned.
func (r *Registry) StartRecover(ctx context.Context) (*Recovery, error) {
	rc := &Recovery{done: make(chan struct{})}
	if r.ckpt == nil {
		close(rc.done)
		return rc, fmt.Errorf("%w: Recover needs Config.StateFile", ErrInvalidOptions)
	}
	c := r.ckpt
	rc.rep = RecoverReport{Path: c.path, Restored: map[State]int{}}
	work, err := r.readState(ctx, rc)
	c.mu.Lock()
	c.enabled = true
	c.mu.Unlock()
	r.stateChanged()
	if err != nil || len(work) == 0 {
		close(rc.done)
		if err == nil {
			r.log.Info("recovered processes from the state file", "path", c.path, "restored", rc.rep.Restored, "skipped", rc.rep.Skipped)
		}
		return rc, err
	}
	if !r.goTracked(func() { r.recoverInBackground(ctx, rc, work) }) {
		// Closed meanwhile: Close stopped everything.
		close(rc.done)
	}
	return rc, nil
}

// recoverWork is a process the background part of a recovery settles.
type recoverWork struct {
	p   *proc
	rec checkpointRecord
}

// readState reads the state file, tracks its processes and returns those
// that need the sandbox.
func (r *Registry) readState(ctx context.Context, rc *Recovery) ([]recoverWork, error) {
	c := r.ckpt
	rep := &rc.rep
	// Temporary files of writes that a crash interrupted never replaced
	// the state file; they are garbage.
	if stale, _ := filepath.Glob(filepath.Join(filepath.Dir(c.path), "."+filepath.Base(c.path)+".tmp-*")); len(stale) > 0 {
		for _, f := range stale {
			os.Remove(f)
		}
		r.log.Debug("recover: removed temporary files of interrupted checkpoints", "count", len(stale))
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("registry: recover: %w", err)
	}
	data, err := os.ReadFile(c.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registry: recover: read state file: %w", err)
	}
	var f checkpointFile
	if err := json.Unmarshal(data, &f); err == nil && f.Version != checkpointVersion {
		err = fmt.Errorf("unknown format version %d (this corral writes %d)", f.Version, checkpointVersion)
		return nil, r.setAside(rep, err)
	} else if err != nil {
		return nil, r.setAside(rep, err)
	}

	var work []recoverWork
	for _, rec := range f.Processes {
		if !ValidID(rec.ID) || !rec.State.Valid() || rec.Backend == "" {
			r.log.Warn("recover: malformed process record skipped", "id", rec.ID, "state", rec.State)
			rep.Skipped++
			continue
		}
		p := r.restoredProc(rec)
		// A finished process is settled from its record alone: no call
		// to the sandbox, so no goroutine either. One whose leader left
		// part of its tree running is followed again (restoreFinished).
		settled := rec.State.Final() && !(rec.TreeRunning && rec.Ref != nil)
		if rec.State.Final() {
			p.settle()
			if settled {
				p.treeGone()
			}
		}
		r.mu.Lock()
		if _, dup := r.procs[p.id]; dup || r.closed {
			r.mu.Unlock()
			rep.Skipped++
			continue
		}
		r.admitLocked(p)
		r.mu.Unlock()
		if settled {
			rep.Restored[rec.State]++
			continue
		}
		rep.Recovering++
		work = append(work, recoverWork{p: p, rec: rec})
	}
	return work, nil
}

// recoverInBackground is the part of a recovery that needs the sandboxes:
// interrupted starts are ended (a batch per backend), the other processes
// re-attached, at most recoverParallel Attach calls at a time.
func (r *Registry) recoverInBackground(ctx context.Context, rc *Recovery, work []recoverWork) {
	defer close(rc.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(r.ctx, cancel)()
	began := time.Now()

	var (
		wg  sync.WaitGroup
		sem = make(chan struct{}, recoverParallel)
	)
	swept := map[string][]recoverWork{} // by backend: looked for by tag
	for _, w := range work {
		if w.rec.State == StateStarting || !w.rec.State.Final() && w.rec.Ref == nil {
			swept[w.rec.Backend] = append(swept[w.rec.Backend], w)
			continue
		}
		wg.Go(func() {
			st := r.reattach(ctx, w.p, w.rec, sem)
			rc.settled(st, false)
		})
	}
	for backend, ws := range swept {
		wg.Go(func() {
			for _, w := range r.sweepInterrupted(ctx, backend, ws, sem) {
				rc.settled(w.state, w.interrupted)
			}
		})
	}
	wg.Wait()
	rep := rc.Report()
	r.log.Info("recovered processes from the state file", "path", r.ckpt.path, "restored", rep.Restored,
		"interrupted", rep.Interrupted, "skipped", rep.Skipped, "took", time.Since(began).Round(time.Millisecond))
	// Sessions are waited for once every process is settled: one that
	// turned out to have ended needs no front end.
	r.awaitSessions()
}

// setAside moves a corrupt state file out of the way so that the registry
// can start, and says so loudly.
func (r *Registry) setAside(rep *RecoverReport, cause error) error {
	aside := fmt.Sprintf("%s.corrupt-%s", r.ckpt.path, time.Now().UTC().Format("20060102T150405.000000000Z"))
	if err := os.Rename(r.ckpt.path, aside); err != nil {
		return fmt.Errorf("registry: recover: state file %s is corrupt (%v) and could not be set aside: %w", r.ckpt.path, cause, err)
	}
	rep.SetAside = aside
	rep.Notice = fmt.Sprintf("the state file %s was corrupt (%v); it was moved to %s and corral started with no tracked processes: processes started before are not listed (they may still run)",
		r.ckpt.path, cause, aside)
	r.log.Error("corrupt state file set aside", "path", r.ckpt.path, "moved_to", aside, "err", cause)
	return nil
}

// restoredProc builds the proc of a record, in its recorded state.
func (r *Registry) restoredProc(rec checkpointRecord) *proc {
	opts := StartOptions{
		Backend:     rec.Backend,
		Command:     rec.Command,
		Dir:         rec.Dir,
		PTY:         rec.PTYSize,
		Stdin:       rec.Stdin,
		Labels:      rec.Labels,
		Watch:       rec.Watch,
		WatchRegex:  rec.WatchRegex,
		Notify:      rec.Notify,
		Name:        rec.Name,
		TTL:         rec.TTL,
		IdleTimeout: rec.IdleTimeout,
		Key:         rec.Key,
		Limits:      copyLimits(rec.Limits),
		Runaway:     copyRunaway(rec.Runaway),
	}
	if opts.Runaway.Validate() != nil {
		opts.Runaway = nil // a hand-edited file: the registry's default applies
	}
	if opts.Key != "" && !ValidKey(opts.Key) {
		opts.Key = ""
	}
	if ValidSessionID(rec.Session) {
		opts.Session = rec.Session
	}
	if opts.Name != "" && ValidateName(opts.Name) != nil {
		opts.Name = "" // not written by this registry: ignore rather than confuse IDs
	}
	if rec.PTY && opts.PTY == nil {
		sz := env.DefaultWindowSize
		opts.PTY = &sz
	}
	p := r.newProc(rec.ID, opts, rec.CreatedAt, restoredState(rec.State))
	p.restoreLife(rec)
	p.foreground, p.envDigest = rec.Foreground, rec.EnvDigest
	p.replay = rec.Ref != nil // detached output is replayable
	p.killReason, p.timedOut, p.pending = rec.KillReason, rec.TimedOut, rec.PendingKill.restore()
	p.readyAt = rec.ReadyAt
	if rec.Ready != nil {
		// Conditions a record holds passed validation when it was written;
		// should one not, readiness is simply not watched.
		if rd, err := validateReady(rec.Ready); err == nil {
			p.ready, p.opts.Ready = rd, &rd.opts
			if !rec.ReadyAt.IsZero() || rec.State.Final() {
				// Ready stays ready; a finished process is not watched.
				rd.lines = nil
				rd.pending.Store(0)
				if !rec.ReadyAt.IsZero() {
					close(rd.ch)
				}
			}
		}
	}
	// A kill of the supervisor before ended it, or is ending it: not a crash.
	p.ourSignal.Store(rec.KillReason != "")
	p.leftover = rec.Leftover
	if rec.State.Final() {
		p.lazy = &lazyOutput{bytes: rec.OutputBytes, turn: make(chan struct{}, 1)}
	}
	p.watchDisabled.Store(rec.WatchDisabled)
	if !rec.State.Final() && !rec.WatchDisabled {
		// Invalid patterns cannot be in a record written by New's
		// validation; if they are, watching is simply off.
		p.watch, _ = newWatcher(rec.Watch, rec.WatchRegex)
	}
	return p
}

// reattach brings a restored process back to life and returns the state
// it was restored in. sem holds its slot for the Attach only.
func (r *Registry) reattach(ctx context.Context, p *proc, rec checkpointRecord, sem chan struct{}) State {
	if rec.State.Final() {
		r.restoreFinished(ctx, p, rec, sem)
		return rec.State
	}
	h, err := attachIn(ctx, sem, func(ctx context.Context) (env.Process, error) { return r.attachPatient(ctx, rec.Backend, *rec.Ref) })
	if err != nil {
		p.markLost(fmt.Errorf("re-attach after restart: %w", err))
		return StateLost
	}

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		h.Release()
		p.markLost(fmt.Errorf("registry: recover %s: %w", p.id, ErrClosed))
		return StateLost
	}
	r.wg.Add(1)
	r.mu.Unlock()
	// A Wait on a context that is already done answers only what the
	// handle knows without asking its sandbox: whether the process ended
	// while no supervisor ran (see StartRecover).
	peek, cancel := context.WithCancel(ctx)
	cancel()
	_, werr := h.Wait(peek)
	ended := werr == nil
	// Opened by the attach: what a sandbox found gone later closes.
	e, _ := r.environment(ctx, rec.Backend)
	if !p.reattached(h, e, ended) {
		r.wg.Done()
		h.Release()
		return p.info().State
	}
	r.log.Debug("re-attached", "id", p.id, "backend", p.backend, "pid", h.PID(), "ended", ended)
	p.rearm(ctx, h)
	go p.monitor()
	if !ended {
		if p.foreground {
			r.killOrphanedForeground(p)
		}
		return StateRunning
	}
	// It ended while no supervisor ran: it stays recovering until the
	// monitor has read its output back and recorded the end, so that it
	// is never listed running after it ended.
	t := time.NewTimer(recoverRefillTimeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
	case <-ctx.Done():
	}
	// Not recorded yet (a huge output, a slow sandbox): its monitor will;
	// meanwhile it is what it was before the restart.
	return p.leaveRecovering()
}

// attachPatient is attach for a recovery: a backend that is unavailable
// for now (a paused container, a host reconnecting) is asked again, with
// backoff, until ctx ends; its processes stay recovering meanwhile
// instead of being declared lost for a passing fault.
func (r *Registry) attachPatient(ctx context.Context, backend string, ref env.Ref) (env.Process, error) {
	var h env.Process
	err := patient(ctx, func() error {
		var err error
		h, err = r.attach(ctx, backend, ref)
		return err
	})
	return h, err
}

// patient runs fn until it returns an error other than one matching
// env.ErrUnavailable, or ctx ends (then the last error stands).
func patient(ctx context.Context, fn func() error) error {
	b := backoff.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second, Factor: 2}
	for {
		err := fn()
		if err == nil || !errors.Is(err, env.ErrUnavailable) || ctx.Err() != nil {
			return err
		}
		if backoff.Sleep(ctx, b.Next(), nil) != nil {
			return err
		}
	}
}

// attachIn runs attach holding a slot of sem (nil: none).
func attachIn(ctx context.Context, sem chan struct{}, attach func(context.Context) (env.Process, error)) (env.Process, error) {
	if sem != nil {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		defer func() { <-sem }()
	}
	return attach(ctx)
}

func (r *Registry) attach(ctx context.Context, backend string, ref env.Ref) (env.Process, error) {
	e, err := r.environment(ctx, backend)
	if err != nil {
		return nil, err
	}
	return e.Attach(ctx, ref)
}

// restoreFinished restores a finished process whose leader had left part
// of its tree running: it is attached, and in the background its output
// is read back and then its tree followed, as the supervisor before the
// restart did.
func (r *Registry) restoreFinished(ctx context.Context, p *proc, rec checkpointRecord, sem chan struct{}) {
	h, err := attachIn(ctx, sem, func(ctx context.Context) (env.Process, error) { return r.attachPatient(ctx, rec.Backend, *rec.Ref) })
	if err != nil {
		r.log.Debug("recover: cannot follow the tree of a finished process", "id", p.id, "err", err)
		p.treeGone()
		return
	}
	p.setHandle(h) // also what pruning or Remove deletes the sandbox state with
	p.rearm(ctx, h)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		p.treeGone()
		return
	}
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		// First, so that what the tree writes later is appended at
		// the end of the output, not read as its beginning.
		if err := p.loadOutput(r.ctx, 0); err != nil {
			r.log.Debug("recover: read back the output of a finished process", "id", p.id, "err", err)
		}
		p.followTree(r.ctx, h)
	}()
}

// markLost records a restored process as lost.
func (p *proc) markLost(err error) {
	p.endUnrun(StateLost, err.Error())
	p.r.log.Warn("process lost on recovery", "id", p.id, "err", err)
	p.r.ev.publish(Event{Type: EventExited, ID: p.id, Command: p.opts.Command, State: StateLost, Notify: p.opts.Notify,
		Summary: fmt.Sprintf("%s lost: %v", p.id, err), consumed: &p.finalSeen})
}

// orphanedForegroundReason is the Reason of a foreground process killed at
// recovery.
const orphanedForegroundReason = "killed at recovery: it ran in the foreground, and its caller (a corral run client, whose connection was its lease) was lost with the supervisor"

// killOrphanedForeground kills, in the background, a foreground process
// found running after a restart: the caller that waited for it went away
// with the supervisor that crashed, and a foreground process never
// outlives its caller.
func (r *Registry) killOrphanedForeground(p *proc) {
	p.annotate(orphanedForegroundReason, false)
	r.log.Info("recover: killing a foreground process whose caller was lost", "id", p.id)
	r.goTracked(func() {
		_, grace, _ := r.killParams("", 0)
		ctx, cancel := context.WithTimeout(r.ctx, grace+killAfterCancel)
		defer cancel()
		if _, err := p.kill(ctx, killPlan{sig: env.SIGTERM, grace: grace, escalate: true, reason: StateKilled}); err != nil && r.ctx.Err() == nil {
			r.log.Warn("recover: kill of an orphaned foreground process failed", "id", p.id, "err", err)
		}
	})
}

// rearm restarts, after a restart, the readiness watch of a re-attached
// process that was not ready yet, and its deadlines (a TTL that ran out
// while no supervisor ran fires at once).
func (p *proc) rearm(ctx context.Context, h env.Process) {
	if p.ready != nil && !p.ready.isReady() {
		if e, err := p.r.environment(ctx, p.backend); err == nil {
			p.armReady(h, e)
		}
	}
	p.armDeadlines()
}
