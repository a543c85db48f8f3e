package registry

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/corralhq/corral/env"
)

// The environment cache: one env.Environment per backend target, opened
// on first use by Config.Open and shared by every process on that target;
// concurrent first uses wait for the same Open.

// envSlot is one opened (or opening) environment.
type envSlot struct {
	ready    chan struct{} // closed once Open returned
	env      env.Environment
	err      error
	openedAt time.Time // set before ready is closed
	health   *backendHealth
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
		slot = &envSlot{ready: make(chan struct{}), health: newBackendHealth()}
		r.envs[target] = slot
		r.mu.Unlock()
		e, err := r.cfg.Open(ctx, target)
		if err == nil && e == nil {
			err = fmt.Errorf("Config.Open returned no environment")
		}
		slot.env, slot.err, slot.openedAt = e, err, time.Now()
		if err != nil {
			// Not cached: the next start retries.
			r.mu.Lock()
			if r.envs[target] == slot {
				delete(r.envs, target)
			}
			r.mu.Unlock()
		}
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
	// paused, unreachable or gone, with why, or ok.
	Health BackendHealth `json:"health"`
}

// Backends lists the environments the registry has opened, by target.
// Environments still opening are left out.
func (r *Registry) Backends() []BackendInfo {
	type open struct {
		target string
		slot   *envSlot
	}
	r.mu.Lock()
	var slots []open
	for target, slot := range r.envs {
		select {
		case <-slot.ready:
			if slot.err == nil {
				slots = append(slots, open{target, slot})
			}
		default:
		}
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
		if cr, ok := o.slot.env.(env.ConnReporter); ok {
			if st := cr.ConnStatus(); st.State != "" {
				bi.Conn = &st
			}
		}
		out = append(out, bi)
	}
	slices.SortFunc(out, func(a, b BackendInfo) int { return cmp.Compare(a.Target, b.Target) })
	return out
}
