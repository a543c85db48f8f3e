package registry

import (
	"context"
	"fmt"

	"github.com/corralhq/corral/env"
)

// The environment cache: one env.Environment per backend target, opened
// on first use by Config.Open and shared by every process on that target;
// concurrent first uses wait for the same Open.

// envSlot is one opened (or opening) environment.
type envSlot struct {
	ready chan struct{} // closed once Open returned
	env   env.Environment
	err   error
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
		slot = &envSlot{ready: make(chan struct{})}
		r.envs[target] = slot
		r.mu.Unlock()
		e, err := r.cfg.Open(ctx, target)
		if err == nil && e == nil {
			err = fmt.Errorf("Config.Open returned no environment")
		}
		slot.env, slot.err = e, err
		if err != nil {
			// Not cached: the next start retries.
			r.mu.Lock()
			if r.envs[target] == slot {
				delete(r.envs, target)
			}
			r.mu.Unlock()
		}
		close(slot.ready)
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
