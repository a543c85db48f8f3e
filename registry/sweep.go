package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/corralhq/corral/env"
)

// Interrupted starts. A registry with a state file records a process
// before it asks the environment to start it, tagged with its ID
// (Spec.Tag), and records it running only once Start is about to confirm
// it to its caller (see Registry.Start and recordLocked). A record still
// starting after a restart is a start the previous registry died in:
// its caller was told it failed, or nothing. Recovery then ends whatever
// it left running, found through its Ref when the record had one, else by
// its tag (env.TagFinder), and restores it failed. A record running
// without a Ref (a process that was not detached, which nobody can
// re-attach) is swept the same way and restored lost.

// sweepTimeout bounds the end of one interrupted start's trees: the kill,
// the check that nothing is left, and the removal of its state.
const sweepTimeout = 30 * time.Second

// Reasons of the processes recovery sweeps.
const (
	interruptedReason = "the supervisor stopped during this start, before it was confirmed"
	notDetachedReason = "it was not started detached (a PTY, or a backend without re-attach), so it could not be re-attached after the supervisor restarted"
)

// sweepOutcome is the state a swept process was restored in.
type sweepOutcome struct {
	state       State
	interrupted bool
}

// sweepInterrupted ends what the records ws of one backend left running
// and settles them.
func (r *Registry) sweepInterrupted(ctx context.Context, backend string, ws []recoverWork, sem chan struct{}) []sweepOutcome {
	found, lookErr := r.findTagged(ctx, backend, ws, sem)
	out := make([]sweepOutcome, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() {
			hs, ok := found[w.p.id]
			if !ok && lookErr != nil && w.rec.Ref != nil {
				// Not looked for by tag: the Ref says where it is.
				h, err := attachIn(ctx, sem, func(ctx context.Context) (env.Process, error) { return r.attachPatient(ctx, backend, *w.rec.Ref) })
				switch {
				case err == nil:
					hs, ok = []env.Process{h}, true
				case errors.Is(err, env.ErrNotFound) || errors.Is(err, env.ErrSandboxGone):
					hs, ok = nil, true // nothing of it is left to end
				}
			}
			var (
				what  string
				ended int
			)
			switch {
			case !ok:
				what = fmt.Sprintf("it could not be looked for, so it may still run in %s untracked: %v", backend, lookErr)
			default:
				n, err := r.endTrees(ctx, hs)
				ended = n
				switch {
				case err != nil:
					what = fmt.Sprintf("ending what it started failed, so it may still run in %s untracked: %v", backend, err)
				case n == 0:
					what = "nothing of it was running"
				default:
					what = fmt.Sprintf("what it had left running was killed (%d processes)", n)
				}
			}
			interrupted := w.rec.State == StateStarting
			if interrupted && w.rec.Foreground && ended > 0 {
				// A Run's process that ran: its caller was lost with the
				// supervisor, as for one re-attached (recover.go).
				w.p.markKilled(orphanedForegroundReason)
				out[i] = sweepOutcome{StateKilled, true}
				return
			}
			if interrupted {
				w.p.markFailed(interruptedReason + "; " + what)
				out[i] = sweepOutcome{StateFailed, true}
				return
			}
			w.p.markLost(fmt.Errorf("%s; %s", notDetachedReason, what))
			out[i] = sweepOutcome{StateLost, false}
		})
	}
	wg.Wait()
	return out
}

// findTagged asks backend's environment, when it is an env.TagFinder, for
// the processes tagged with the IDs of ws. The error says why nothing was
// looked for.
func (r *Registry) findTagged(ctx context.Context, backend string, ws []recoverWork, sem chan struct{}) (map[string][]env.Process, error) {
	var e env.Environment
	if err := patient(ctx, func() error {
		var err error
		e, err = r.environment(ctx, backend)
		return err
	}); err != nil {
		return nil, err
	}
	tf, ok := e.(env.TagFinder)
	if !ok {
		return nil, fmt.Errorf("its backend cannot look for processes by tag (env.TagFinder): %w", env.ErrUnsupported)
	}
	tags := make([]string, len(ws))
	for i, w := range ws {
		tags[i] = w.p.id
	}
	var found map[string][]env.Process
	_, err := attachIn(ctx, sem, func(ctx context.Context) (env.Process, error) {
		return nil, patient(ctx, func() error {
			var err error
			found, err = tf.Tagged(ctx, tags)
			return err
		})
	})
	if err != nil && len(found) == 0 {
		return nil, err
	}
	if err != nil {
		r.log.Warn("recover: looking for interrupted starts by tag found some, failed for others", "backend", backend, "err", err)
	}
	if found == nil {
		found = map[string][]env.Process{}
	}
	for _, w := range ws {
		// Looked for, and absent: nothing of it runs.
		if _, ok := found[w.p.id]; !ok && err == nil {
			found[w.p.id] = nil
		}
	}
	return found, nil
}

// endTrees kills every tree of hs (SIGKILL), checks that nothing of them
// is left, removes their state in the sandbox and releases the handles.
// It returns how many processes it ended.
func (r *Registry) endTrees(ctx context.Context, hs []env.Process) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	var (
		mu    sync.Mutex
		ended int
		errs  []error
		wg    sync.WaitGroup
	)
	for _, h := range hs {
		wg.Go(func() {
			defer h.Release()
			before, _ := h.Survivors(ctx)
			if err := h.Signal(ctx, env.SIGKILL); err != nil && !errors.Is(err, env.ErrExited) && !errors.Is(err, env.ErrNotFound) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			waitExit(ctx, h, killExitWait)
			left, err := pollTree(ctx, h.Survivors, time.Now().Add(verifyWait), func() { _ = h.Signal(ctx, env.SIGKILL) })
			mu.Lock()
			ended += max(0, len(before)-len(left))
			if err == nil && len(left) > 0 {
				err = fmt.Errorf("%d processes of the tree survived SIGKILL: %v", len(left), left)
			}
			if err != nil {
				errs = append(errs, err)
			}
			mu.Unlock()
			if err != nil {
				return
			}
			// Its output and exit status are nobody's: no record keeps a
			// Ref to them.
			if err := h.Remove(ctx); err != nil && !errors.Is(err, env.ErrNotFound) {
				r.log.Debug("recover: remove the state of an interrupted start", "err", err)
			}
		})
	}
	wg.Wait()
	return ended, errors.Join(errs...)
}

// markKilled records a restored process as killed by the recovery.
func (p *proc) markKilled(reason string) {
	p.endUnrun(StateKilled, reason)
	p.r.log.Info("recover: killed a foreground process whose caller was lost", "id", p.id)
}

// markFailed records a restored process as failed (an interrupted start).
func (p *proc) markFailed(reason string) {
	p.endUnrun(StateFailed, reason)
	p.r.log.Warn("recover: an interrupted start was ended", "id", p.id, "reason", reason)
}
