package registry

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/corralhq/corral/env"
)

// Ports: which TCP ports a process's tree listens on (ListOptions.Ports),
// and every listening socket of a backend with its corral owner (Ports).
// Each asks each process's env.PortLister once.

// portLookParallel bounds concurrent Listeners calls of one List or Ports:
// on a remote backend each is a round trip.
const portLookParallel = 8

// Ports returns every TCP socket in the LISTEN state of backend ("" for
// Config.DefaultBackend), sorted by port and address, each with the ID and
// name of the tracked process whose tree holds it (empty when corral did
// not start its holder). A backend that cannot see sockets is an error
// matching env.ErrUnsupported.
func (r *Registry) Ports(ctx context.Context, backend string) ([]PortInfo, error) {
	if backend == "" {
		backend = r.cfg.DefaultBackend
	}
	e, err := r.environment(ctx, backend)
	if err != nil {
		return nil, err
	}
	pl, ok := e.(env.PortLister)
	if !ok || !e.Capabilities().Ports {
		return nil, fmt.Errorf("registry: ports of %q: the backend cannot see sockets: %w", backend, env.ErrUnsupported)
	}
	all, err := pl.Listeners(ctx)
	if err != nil {
		return nil, fmt.Errorf("registry: ports of %q: %w", backend, err)
	}
	out := make([]PortInfo, len(all))
	for i, l := range all {
		out[i] = PortInfo{Backend: backend, Listener: l}
	}
	if len(all) == 0 {
		return out, nil
	}
	type key struct {
		port int
		addr string
	}
	index := make(map[key]int, len(all))
	for i, l := range all {
		index[key{l.Port, l.Addr}] = i
	}
	procs := r.selectProcs(ListOptions{Backend: backend})
	owned := r.treeListeners(ctx, procs)
	for i, p := range procs {
		for _, l := range owned[i] {
			if j, ok := index[key{l.Port, l.Addr}]; ok && out[j].ID == "" {
				out[j].ID, out[j].Name = p.id, p.opts.Name
			}
		}
	}
	return out, nil
}

// treeListeners asks each process whose tree may run for its tree's
// listening sockets (nil for a process that cannot tell), concurrently.
func (r *Registry) treeListeners(ctx context.Context, procs []*proc) [][]env.Listener {
	out := make([][]env.Listener, len(procs))
	sem := make(chan struct{}, portLookParallel)
	var wg sync.WaitGroup
	for i, p := range procs {
		if !p.mayRun() {
			continue
		}
		p.mu.Lock()
		pl, ok := p.handle.(env.PortLister)
		p.mu.Unlock()
		if !ok {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ls, err := pl.Listeners(ctx)
			if err != nil {
				r.log.Debug("listeners of a process", "id", p.id, "err", err)
				return
			}
			out[i] = ls
		})
	}
	wg.Wait()
	return out
}

// setPorts fills Info.Ports of the listed processes whose tree runs.
func (r *Registry) setPorts(ctx context.Context, procs []*proc, infos []Info) {
	byID := make(map[string]int, len(infos))
	for i, in := range infos {
		byID[in.ID] = i
	}
	var look []*proc
	for _, p := range procs {
		if i, ok := byID[p.id]; ok && infos[i].TreeRunning {
			look = append(look, p)
		}
	}
	for k, ls := range r.treeListeners(ctx, look) {
		in := &infos[byID[look[k].id]]
		for _, l := range ls {
			if !slices.Contains(in.Ports, l.Port) {
				in.Ports = append(in.Ports, l.Port)
			}
		}
		slices.Sort(in.Ports)
	}
}
