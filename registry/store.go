package registry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/corralhq/corral/env"
)

// The store: the map of tracked processes, lookup by ID or unique prefix,
// registration against MaxProcesses, pruning of finished processes past
// their TTL, List, and Remove.

// cleanupTimeout bounds the environment calls that drop a pruned or
// removed process's state.
const cleanupTimeout = 10 * time.Second

// lookup validates idOrPrefix and returns the process it names.
//
// A name (see ValidateName) names the process whose tree runs under it,
// or else the newest tracked process that had it. A name nobody has is
// ErrInvalidID: the argument is neither an ID nor a known name.
func (r *Registry) lookup(idOrPrefix string) (*proc, error) {
	byName := isNameArg(idOrPrefix)
	h, full, err := parseIDArg(idOrPrefix)
	if err != nil && !byName {
		return nil, err
	}
	now := time.Now()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, fmt.Errorf("registry: %s: %w", idOrPrefix, ErrClosed)
	}
	var p *proc
	if byName {
		if p = r.byNameLocked(idOrPrefix); p == nil {
			r.mu.Unlock()
			return nil, fmt.Errorf("%w %q: no process has that name, and it is not a process ID: %s", ErrInvalidID, truncate(idOrPrefix, 40), idFormMsg)
		}
	} else if full {
		p = r.procs[idPrefix+h]
	} else {
		var matches []string
		for id, q := range r.procs {
			if id[len(idPrefix):len(idPrefix)+len(h)] == h && !r.expired(q, now) {
				matches = append(matches, id)
			}
		}
		switch len(matches) {
		case 0:
		case 1:
			p = r.procs[matches[0]]
		default:
			r.mu.Unlock()
			slices.Sort(matches)
			return nil, &AmbiguousError{Prefix: idOrPrefix, Candidates: matches}
		}
	}
	var pruned []*proc
	if p != nil && r.expired(p, now) {
		delete(r.procs, p.id)
		pruned, p = []*proc{p}, nil
	}
	r.mu.Unlock()
	r.cleanup(pruned)
	if len(pruned) > 0 {
		r.stateChanged()
	}
	if p == nil {
		return nil, fmt.Errorf("%w: %s: it may have finished more than %s ago and been pruned, or been removed",
			ErrNotFound, idOrPrefix, r.cfg.FinishedTTL)
	}
	return p, nil
}

// Resolve returns the full ID that a full ID or a unique prefix of at least
// 4 hex digits (with or without "proc_") names.
func (r *Registry) Resolve(idOrPrefix string) (string, error) {
	p, err := r.lookup(idOrPrefix)
	if err != nil {
		return "", err
	}
	return p.id, nil
}

// Get returns a snapshot of the process idOrPrefix names.
func (r *Registry) Get(_ context.Context, idOrPrefix string) (Info, error) {
	p, err := r.lookup(idOrPrefix)
	if err != nil {
		return Info{}, err
	}
	return p.info(), nil
}

func (r *Registry) expired(p *proc, now time.Time) bool {
	e := p.endedAt.Load()
	return e != 0 && !p.treeLive.Load() && now.Sub(time.Unix(0, e)) >= r.cfg.FinishedTTL
}

func (r *Registry) pruneExpiredLocked(now time.Time) []*proc {
	var pruned []*proc
	for id, p := range r.procs {
		if r.expired(p, now) {
			delete(r.procs, id)
			pruned = append(pruned, p)
		}
	}
	return pruned
}

// cleanup drops the environment state of processes no longer tracked, in
// the background: pruning is a side effect of the call that found them
// expired (a lookup, a listing), which must not wait for a backend that may
// be slow or gone.
func (r *Registry) cleanup(pruned []*proc) {
	if len(pruned) == 0 {
		return
	}
	for _, p := range pruned {
		r.log.Debug("pruned finished process", "id", p.id)
	}
	r.goTracked(func() {
		for _, p := range pruned {
			if r.ctx.Err() != nil {
				return
			}
			h, ref := p.handleAndRef()
			ctx, cancel := context.WithTimeout(r.ctx, cleanupTimeout)
			switch {
			case h != nil:
				r.removeState(ctx, p, h)
			case ref != nil && p.lazy != nil:
				// Restored finished and never looked at since: attach
				// first, which may open its environment.
				if h, err := p.sandboxHandle(ctx); err != nil {
					r.log.Debug("remove process state: attach", "id", p.id, "err", err)
				} else if h != nil {
					r.removeState(ctx, p, h)
				}
			}
			cancel()
		}
	})
}

// removeState deletes a pruned process's state in its sandbox.
func (r *Registry) removeState(ctx context.Context, p *proc, h env.Process) {
	if err := h.Remove(ctx); err != nil {
		r.log.Debug("remove process state", "id", p.id, "err", err)
		h.Release()
	}
}

// admitLocked adds p to the tracked processes.
func (r *Registry) admitLocked(p *proc) {
	r.admits++
	p.admitted = r.admits
	r.procs[p.id] = p
}

// registerNamed registers p (see register) under its name, if it has one.
// When a process whose tree may run holds the name: with reuse and the
// same command, that process is returned (p is not registered); with
// Replace, its tree is killed and the name taken again; otherwise the
// error is ErrNameInUse naming the holder.
func (r *Registry) registerNamed(ctx context.Context, p *proc, reuse bool) (*proc, error) {
	for range replaceAttempts {
		holder, err := r.register(p)
		if err != nil || holder == nil {
			return nil, err
		}
		// The holder may still be starting: its Info says little yet.
		select {
		case <-holder.started:
		case <-ctx.Done():
			return nil, fmt.Errorf("registry: start %s: waiting for %s, which holds the name: %w", p.opts.Name, holder.id, ctx.Err())
		}
		if p.opts.Key != "" && holder.opts.Key == p.opts.Key {
			if holder.failed.Load() {
				continue // it never ran (keyHolderLocked skips it now)
			}
			return holder, nil // this very start, asked again
		}
		switch {
		case !holder.mayRun():
			// Its start failed, or it ended meanwhile: the name is free.
			continue
		case p.opts.Replace:
			r.log.Debug("replacing the holder of a name", "name", p.opts.Name, "id", holder.id)
			_, grace, _ := r.killParams("", 0)
			if _, err := holder.kill(ctx, killPlan{sig: env.SIGTERM, grace: grace, escalate: true, reason: StateKilled}); err != nil {
				return nil, fmt.Errorf("registry: start %s: replace %s: %w", p.opts.Name, holder.id, err)
			}
			select {
			case <-holder.treeDone:
			case <-ctx.Done():
				return nil, fmt.Errorf("registry: start %s: waiting for the tree of %s to end: %w", p.opts.Name, holder.id, ctx.Err())
			case <-r.ctx.Done():
				return nil, fmt.Errorf("registry: start: %w", ErrClosed)
			}
		case reuse && holder.sameCommand(p.opts):
			return holder, nil
		default:
			return nil, nameInUse(p.opts.Name, holder.info())
		}
	}
	return nil, fmt.Errorf("%w: name %s was taken again each time its holder was replaced (%d times): another caller starts it too",
		ErrNameInUse, p.opts.Name, replaceAttempts)
}

// replaceAttempts bounds how often a Replace kills a holder of the name
// and finds it taken again by a concurrent start.
const replaceAttempts = 3

// register reserves an ID for p, making room by pruning. When p has a name
// that a process whose tree may run holds, it registers nothing and
// returns that process.
func (r *Registry) register(p *proc) (holder *proc, err error) {
	now := time.Now()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, fmt.Errorf("registry: start: %w", ErrClosed)
	}
	if h := r.keyHolderLocked(p.opts.Key); h != nil {
		r.mu.Unlock()
		return h, nil
	}
	if p.opts.Name != "" {
		if h := r.nameHolderLocked(p.opts.Name); h != nil {
			r.mu.Unlock()
			return h, nil
		}
	}
	// Checked under the lock a session's end takes too: a process either
	// joins a session before its end collects the members, or is refused.
	if err := r.sessionOpenLocked(p.opts.Session); err != nil {
		r.mu.Unlock()
		return nil, err
	}
	pruned := r.pruneExpiredLocked(now)
	if len(r.procs) >= r.cfg.MaxProcesses {
		var oldest *proc
		for _, q := range r.procs {
			if e := q.endedAt.Load(); e != 0 && !q.treeLive.Load() && (oldest == nil || e < oldest.endedAt.Load()) {
				oldest = q
			}
		}
		if oldest == nil {
			r.mu.Unlock()
			r.cleanup(pruned)
			return nil, fmt.Errorf("%w: all %d tracked processes are still running: wait for or kill some, or raise MaxProcesses",
				ErrLimit, r.cfg.MaxProcesses)
		}
		delete(r.procs, oldest.id)
		pruned = append(pruned, oldest)
	}
	for {
		p.id = newID()
		if _, dup := r.procs[p.id]; !dup {
			break
		}
	}
	r.admitLocked(p)
	r.mu.Unlock()
	r.cleanup(pruned)
	r.stateChanged()
	return nil, nil
}

// List returns snapshots of the processes opts selects, oldest first. In
// process it never fails, and it never waits for a backend: each process
// shows its backend's condition as the registry last saw it
// (Info.BackendCondition). With ListOptions.Ports it asks each backend
// once for the listening ports of its listed trees, and waits for the
// answers at most listPortsWait (see ports.go): a process whose ports did
// not come in time is Info.PortsUnknown.
func (r *Registry) List(ctx context.Context, opts ListOptions) ([]Info, error) {
	procs := r.selectProcs(opts)
	out := make([]Info, 0, len(procs))
	for _, p := range procs {
		in := p.infoWithRef(opts.WithRef)
		if matchState(in, opts) {
			r.setCondition(&in)
			out = append(out, in)
		}
	}
	if opts.Ports {
		r.setPorts(ctx, procs, out)
	}
	return out, nil
}

// selectProcs returns the processes matching opts's labels and backend and
// (by a racy first look, rechecked by List) state, oldest first.
func (r *Registry) selectProcs(opts ListOptions) []*proc {
	now := time.Now()
	r.mu.Lock()
	pruned := r.pruneExpiredLocked(now)
	if len(pruned) > 0 {
		defer r.stateChanged()
	}
	procs := make([]*proc, 0, len(r.procs))
	for _, p := range r.procs {
		if opts.Backend != "" && p.backend != opts.Backend {
			continue
		}
		if !hasLabels(p.opts.Labels, opts.Labels) {
			continue
		}
		if len(opts.States) == 0 && !opts.All && p.endedAt.Load() != 0 && !p.treeLive.Load() {
			continue
		}
		procs = append(procs, p)
	}
	r.mu.Unlock()
	r.cleanup(pruned)
	slices.SortFunc(procs, func(a, b *proc) int {
		return cmp.Or(a.createdAt.Compare(b.createdAt), cmp.Compare(a.admitted, b.admitted))
	})
	return procs
}

// matchState: the states asked for, else every process that has something
// running (the leader, or what it left running), or every one with All.
func matchState(in Info, opts ListOptions) bool {
	if len(opts.States) > 0 {
		return slices.Contains(opts.States, in.State)
	}
	return opts.All || !in.State.Final() || in.TreeRunning
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

// RemoveForce is Remove after killing (SIGKILL, whole tree) whatever of
// the process still runs: the leader, or what it left running.
func (r *Registry) RemoveForce(ctx context.Context, id string) error {
	p, err := r.lookup(id)
	if err != nil {
		return err
	}
	if p.endedAt.Load() == 0 || p.treeLive.Load() {
		if _, err := p.kill(ctx, killPlan{sig: env.SIGKILL, escalate: true, reason: StateKilled}); err != nil {
			return fmt.Errorf("registry: remove %s: %w", p.id, err)
		}
		select {
		case <-p.treeDone:
		case <-ctx.Done():
			return fmt.Errorf("registry: remove %s: waiting for its tree to end: %w", p.id, ctx.Err())
		case <-r.ctx.Done():
			return fmt.Errorf("registry: remove %s: %w", p.id, ErrClosed)
		}
	}
	return r.Remove(ctx, p.id)
}

// Remove forgets a finished process and deletes its state (output, exit
// status) inside the sandbox. It refuses a process that has not finished
// with ErrRunning.
func (r *Registry) Remove(ctx context.Context, id string) error {
	p, err := r.lookup(id)
	if err != nil {
		return err
	}
	if p.endedAt.Load() == 0 {
		return fmt.Errorf("%w: %s is %s: kill it first", ErrRunning, p.id, p.info().State)
	}
	if n := p.liveTree(ctx); n > 0 {
		return fmt.Errorf("%w: %s %s, but %d processes of its tree still run: kill them first, or remove with force",
			ErrRunning, p.id, p.info().State, n)
	}
	r.mu.Lock()
	if r.procs[p.id] == p {
		delete(r.procs, p.id)
	}
	r.mu.Unlock()
	r.stateChanged()
	actx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	h, err := p.sandboxHandle(actx)
	cancel()
	if errors.Is(err, env.ErrNotFound) || errors.Is(err, env.ErrSandboxGone) {
		return nil // its state in the sandbox is gone already
	}
	if err != nil {
		return fmt.Errorf("registry: remove %s: forgotten, but its state in the sandbox was not deleted: %w", p.id, err)
	}
	if h != nil {
		if err := h.Remove(ctx); err != nil {
			h.Release()
			return fmt.Errorf("registry: remove %s: forgotten, but its state in the sandbox was not deleted: %w", p.id, err)
		}
	}
	return nil
}
