package registry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/env"
)

// The environment cache: one env.Environment per backend target, opened
// on first use by Config.Open and shared by every process on that target;
// concurrent first uses wait for the same Open.
//
// A sandbox that vanishes (a container removed with docker rm -f, stopped,
// or replaced under its name) makes its environment's calls fail with
// env.ErrSandboxGone for good. The first such failure the registry sees
// (a process's output or wait, a start) takes the environment out of the
// cache (envGone): the next call on the target opens it again, which
// creates a fresh docker-image:// sandbox or finds the container that now
// has the docker://NAME, or fails with Open's error. The processes that ran
// in the old sandbox are recorded lost, each with the error that said so;
// the old environment is closed once they are (its backend's Close frees
// what is left: connections, a sandbox that is not quite gone). Until the
// target is opened again, Backends lists it with Gone set.

// envSlot is one opened (or opening) environment.
type envSlot struct {
	ready    chan struct{} // closed once Open returned
	env      env.Environment
	err      error
	openedAt time.Time // set before ready is closed
	health   *backendHealth
	// treeCalls bounds the calls on process trees (signals, looks at a
	// tree) in flight on this backend (see treeCallTurn).
	treeCalls chan struct{}
	// statsUnsupported: the environment offered env.TreeStatter but what
	// it wraps cannot measure (its TreeStats said env.ErrUnsupported).
	statsUnsupported atomic.Bool
}

// GoneInfo says when and why the sandbox of a target vanished.
type GoneInfo struct {
	// Name is the environment's name ("docker://corral-1a2b…").
	Name   string    `json:"name"`
	Since  time.Time `json:"since"`
	Reason string    `json:"reason"`
}

// goneCloseWait bounds how long an environment whose sandbox is gone stays
// open for its processes to find out and be recorded lost.
const goneCloseWait = 30 * time.Second

// maxGoneReason bounds the reason kept for a gone sandbox.
const maxGoneReason = 300

// envGone takes e, target's environment, out of the cache after a call on
// it failed with cause, when cause matches env.ErrSandboxGone; the next
// call on target opens it again (see the top of this file). It does
// nothing when target already holds another environment, so a late error
// from an old sandbox never evicts a fresh one. It reports whether cause
// means the sandbox is gone.
func (r *Registry) envGone(target string, e env.Environment, cause error) bool {
	if e == nil || !errors.Is(cause, env.ErrSandboxGone) {
		return false
	}
	r.mu.Lock()
	slot, ok := r.envs[target]
	if r.closed || !ok || !slot.opened() || slot.env != e {
		r.mu.Unlock()
		return true
	}
	delete(r.envs, target)
	r.gone[target] = GoneInfo{Name: e.Name(), Since: time.Now(), Reason: clip(cause.Error(), maxGoneReason)}
	var running []<-chan struct{}
	for _, p := range r.procs {
		if p.backend == target {
			running = append(running, p.done)
		}
	}
	r.wg.Add(1)
	r.mu.Unlock()
	r.log.Warn("sandbox gone; the next call on its target opens it again", "target", target, "env", e.Name(), "err", cause)
	go func() {
		defer r.wg.Done()
		t := time.NewTimer(goneCloseWait)
		defer t.Stop()
	wait:
		for _, done := range running {
			select {
			case <-done:
			case <-t.C:
				break wait
			case <-r.stop:
				break wait
			}
		}
		if err := e.Close(); err != nil {
			r.log.Debug("closing the environment of a gone sandbox", "target", target, "err", err)
		}
	}()
	return true
}

// opened reports whether Open returned an environment for the slot.
func (s *envSlot) opened() bool {
	select {
	case <-s.ready:
		return s.err == nil
	default:
		return false
	}
}

// environment returns the environment for target, opening it once.
func (r *Registry) environment(ctx context.Context, target string) (env.Environment, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, fmt.Errorf("registry: open %q: %w", target, ErrClosed)
	}
	slot, ok := r.envs[target]
	if !ok {
		slot = &envSlot{ready: make(chan struct{}), health: newBackendHealth(), treeCalls: make(chan struct{}, treeCallsPerBackend)}
		r.envs[target] = slot
		r.mu.Unlock()
		e, err := r.cfg.Open(ctx, target)
		if err == nil && e == nil {
			err = fmt.Errorf("Config.Open returned no environment")
		}
		slot.env, slot.err, slot.openedAt = e, err, time.Now()
		r.mu.Lock()
		if err != nil {
			// Not cached: the next start retries.
			if r.envs[target] == slot {
				delete(r.envs, target)
			}
		} else {
			delete(r.gone, target)
		}
		r.mu.Unlock()
		close(slot.ready)
		if err == nil {
			r.watchHealth(target, slot)
		}
	} else {
		r.mu.Unlock()
		select {
		case <-slot.ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("registry: open %q: %w", target, ctx.Err())
		}
	}
	if slot.err != nil {
		return nil, fmt.Errorf("registry: open backend %q: %w", target, slot.err)
	}
	return slot.env, nil
}

// BackendInfo describes an environment the registry holds open.
type BackendInfo struct {
	// Target is the backend target it was opened for ("local",
	// "ssh://dev"); Name is the environment's own, canonical name.
	Target   string    `json:"target"`
	Name     string    `json:"name"`
	OpenedAt time.Time `json:"opened_at"`
	// Tracked counts the processes the registry tracks on it, Running
	// those of them whose tree runs.
	Tracked int `json:"tracked"`
	Running int `json:"running"`
	// Conn is the connection it holds, for environments that have one
	// (env.ConnReporter).
	Conn *env.ConnStatus `json:"conn,omitempty"`
	// Health is its condition as the registry last saw it (health.go):
	// paused, unreachable or gone, with why, or ok. A target whose
	// sandbox vanished and that was not opened again since is listed
	// gone (it is then not open, OpenedAt is zero and Name is the old
	// environment's): the next call on the target opens it again.
	Health BackendHealth `json:"health"`
	// Limits and LimitsNote are its Capabilities': the per-process
	// limits it enforces, and why one is missing (corral doctor).
	Limits     []string `json:"limits,omitempty"`
	LimitsNote string   `json:"limits_note,omitempty"`
}

// Backends lists the environments the registry has opened, by target,
// and the targets whose sandbox is gone (condition gone). Environments
// still opening are left out.
func (r *Registry) Backends() []BackendInfo {
	type open struct {
		target string
		slot   *envSlot
	}
	r.mu.Lock()
	var slots []open
	for target, slot := range r.envs {
		if slot.opened() {
			slots = append(slots, open{target, slot})
		}
	}
	gone := maps.Clone(r.gone)
	for target := range r.envs {
		delete(gone, target) // opening again
	}
	procs := make([]*proc, 0, len(r.procs))
	for _, p := range r.procs {
		procs = append(procs, p)
	}
	r.mu.Unlock()

	type counts struct{ tracked, running int }
	byTarget := make(map[string]counts, len(slots))
	for _, p := range procs {
		c := byTarget[p.backend]
		c.tracked++
		if p.info().TreeRunning {
			c.running++
		}
		byTarget[p.backend] = c
	}
	out := make([]BackendInfo, 0, len(slots))
	for _, o := range slots {
		c := byTarget[o.target]
		bi := BackendInfo{Target: o.target, Name: o.slot.env.Name(), OpenedAt: o.slot.openedAt, Tracked: c.tracked, Running: c.running,
			Health: o.slot.health.snapshot()}
		caps := o.slot.env.Capabilities()
		bi.Limits, bi.LimitsNote = slices.Clone(caps.Limits), caps.LimitsNote
		if cr, ok := o.slot.env.(env.ConnReporter); ok {
			if st := cr.ConnStatus(); st.State != "" {
				bi.Conn = &st
			}
		}
		out = append(out, bi)
	}
	for target, g := range gone {
		c := byTarget[target]
		out = append(out, BackendInfo{Target: target, Name: g.Name, Tracked: c.tracked, Running: c.running,
			Health: BackendHealth{Condition: env.ConditionGone, Detail: g.Reason + "; the next run or start on it opens it again", Since: g.Since}})
	}
	slices.SortFunc(out, func(a, b BackendInfo) int { return cmp.Compare(a.Target, b.Target) })
	return out
}
