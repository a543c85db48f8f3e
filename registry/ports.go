package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/corralhq/corral/env"
)

// Ports: which TCP ports a process's tree listens on (ListOptions.Ports),
// and every listening socket of a backend with its corral owner (Ports).
//
// A listing asks each backend once for the listeners of all its listed
// trees: one env.TreePortLister call (on a sandbox backend, one round
// trip), or, from a backend without it, one Listeners call per process,
// portLookParallel at a time. It never asks a backend that a health check
// found paused, unreachable or gone, and it waits at most listPortsWait
// for the answers: a look that takes longer goes on in the background,
// bounded by portLookTimeout, and fills a short cache (portsCacheTTL) that
// the next listing reads. A process whose ports are not known in time is
// Info.PortsUnknown. At most one look per backend is in flight; a listing
// that finds one waits for it instead of starting another.

const (
	// portLookParallel bounds concurrent Listeners calls of one look at a
	// backend without TreePortLister.
	portLookParallel = 8
	// listPortsWait bounds how long a listing waits for port look-ups.
	listPortsWait = 600 * time.Millisecond
	// portLookTimeout bounds one look at a backend, in the background.
	portLookTimeout = 10 * time.Second
	// portsCacheTTL is how long a look's answer stands for the next
	// listings.
	portsCacheTTL = time.Second
	// portsTimeout bounds Ports (every socket of a backend).
	portsTimeout = 10 * time.Second
)

// portCache holds, per backend, the last look's answers and the look in
// flight.
type portCache struct {
	mu        sync.Mutex
	byBackend map[string]*backendPorts
}

type backendPorts struct {
	at      time.Time       // when the last look ended
	known   map[*proc][]int // its answers: the ports of each process it could see
	looking *portLook       // the look in flight, nil when none
}

// portLook is one look at a backend's trees.
type portLook struct {
	done    chan struct{} // closed when res is set
	backend string
	procs   []*proc
	res     map[*proc][]int // the processes whose ports it found out
}

// Ports returns every TCP socket in the LISTEN state of backend ("" for
// Config.DefaultBackend), sorted by port and address, each with the ID and
// name of the tracked process whose tree holds it (empty when corral did
// not start its holder). A backend that cannot see sockets is an error
// matching env.ErrUnsupported; one that a health check found not answering
// an error matching ErrUnreachable, at once. It takes at most portsTimeout.
func (r *Registry) Ports(ctx context.Context, backend string) ([]PortInfo, error) {
	if backend == "" {
		backend = r.cfg.DefaultBackend
	}
	ctx, cancel := context.WithTimeout(ctx, portsTimeout)
	defer cancel()
	e, err := r.environment(ctx, backend)
	if err != nil {
		return nil, err
	}
	pl, ok := e.(env.PortLister)
	if !ok || !e.Capabilities().Ports {
		return nil, fmt.Errorf("registry: ports of %q: the backend cannot see sockets: %w", backend, env.ErrUnsupported)
	}
	if h, probed := r.condition(backend); probed && h.Condition != env.ConditionOK {
		return nil, fmt.Errorf("%w: ports of %s: it is %s: %s", ErrUnreachable, backend, h.Condition, h.Detail)
	}
	ctx, wrap, cancelCall := r.callCtx(ctx, backend, portsTimeout)
	defer cancelCall()
	all, err := pl.Listeners(ctx)
	err = wrap(err)
	r.observe(backend, answered(err), "a port look-up")
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
	owned, _ := r.treeListeners(ctx, e, procs)
	for i, p := range procs {
		for _, l := range owned[i] {
			if j, ok := index[key{l.Port, l.Addr}]; ok && out[j].ID == "" {
				out[j].ID, out[j].Name = p.id, p.opts.Name
			}
		}
	}
	return out, nil
}

// treeListeners asks e for the listeners of each of procs whose tree may
// run: in one call where e implements env.TreePortLister, else one call per
// process, concurrently. known[i] tells whether procs[i]'s answer came
// (a process without a handle yet, or whose call failed, has none).
func (r *Registry) treeListeners(ctx context.Context, e env.Environment, procs []*proc) (out [][]env.Listener, known []bool) {
	out = make([][]env.Listener, len(procs))
	known = make([]bool, len(procs))
	handles := make([]env.Process, len(procs))
	var idx []int
	for i, p := range procs {
		if !p.mayRun() {
			known[i] = true
			continue
		}
		handles[i] = p.currentHandle()
		if handles[i] != nil {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return out, known
	}
	if tl, ok := e.(env.TreePortLister); ok {
		hs := make([]env.Process, len(idx))
		for k, i := range idx {
			hs[k] = handles[i]
		}
		ls, err := tl.TreeListeners(ctx, hs)
		r.observe(procs[idx[0]].backend, answered(err), "a port look-up")
		switch {
		case err == nil:
			for k, i := range idx {
				out[i], known[i] = ls[k], true
			}
			return out, known
		case !errors.Is(err, env.ErrUnsupported):
			// A wrapper (the daemon's) may offer the call and find that
			// what it wraps does not: then each process is asked.
			r.log.Debug("listeners of the trees", "backend", procs[idx[0]].backend, "err", err)
			return out, known
		}
	}
	sem := make(chan struct{}, portLookParallel)
	var wg sync.WaitGroup
	for _, i := range idx {
		pl, ok := handles[i].(env.PortLister)
		if !ok {
			known[i] = true // a process that cannot tell listens on nothing we can see
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ls, err := pl.Listeners(ctx)
			r.observe(procs[i].backend, answered(err), "a port look-up")
			if err != nil {
				r.log.Debug("listeners of a process", "id", procs[i].id, "err", err)
				return
			}
			out[i], known[i] = ls, true
		})
	}
	wg.Wait()
	return out, known
}

// setPorts fills Info.Ports (or PortsUnknown) of the listed processes whose
// tree runs, asking each backend at most once and waiting at most
// listPortsWait (less when ctx ends sooner).
func (r *Registry) setPorts(ctx context.Context, procs []*proc, infos []Info) {
	byID := make(map[string]int, len(infos))
	for i, in := range infos {
		byID[in.ID] = i
	}
	groups := map[string][]*proc{}
	for _, p := range procs {
		if i, ok := byID[p.id]; ok && infos[i].TreeRunning {
			groups[p.backend] = append(groups[p.backend], p)
		}
	}
	if len(groups) == 0 {
		return
	}
	wait, cancel := context.WithTimeout(ctx, listPortsWait)
	defer cancel()
	found := map[*proc][]int{}
	var looks []*portLook
	now := time.Now()
	r.ports.mu.Lock()
	if r.ports.byBackend == nil {
		r.ports.byBackend = map[string]*backendPorts{}
	}
	for backend, ps := range groups {
		bp := r.ports.byBackend[backend]
		if bp == nil {
			bp = &backendPorts{}
			r.ports.byBackend[backend] = bp
		}
		fresh := now.Sub(bp.at) < portsCacheTTL
		missing := false
		for _, p := range ps {
			if ls, ok := bp.known[p]; ok && fresh {
				found[p] = ls
			} else {
				missing = true
			}
		}
		if !missing {
			continue
		}
		if h, probed := r.condition(backend); probed && h.Condition != env.ConditionOK {
			continue // not asked: its processes' ports stay unknown
		}
		if bp.looking == nil {
			bp.looking = r.startLook(backend, ps)
		}
		if bp.looking != nil {
			looks = append(looks, bp.looking)
		}
	}
	r.ports.mu.Unlock()

	for _, l := range looks {
		select {
		case <-l.done:
		case <-wait.Done():
		}
	}
	for _, l := range looks {
		select {
		case <-l.done:
			for p, ls := range l.res {
				if _, ok := found[p]; !ok {
					found[p] = ls
				}
			}
		default:
			// Still looking: its answer is for the next listing, and a
			// backend that slow is checked now rather than at the
			// prober's next round.
			if slot := r.slotOf(l.backend); slot != nil {
				slot.health.poke()
			}
		}
	}
	for _, ps := range groups {
		for _, p := range ps {
			in := &infos[byID[p.id]]
			if ports, ok := found[p]; ok {
				in.Ports = ports
			} else {
				in.PortsUnknown = true
			}
		}
	}
}

// startLook starts a look at backend's trees in the background; the
// caller holds r.ports.mu. It returns nil when the backend is not open
// (its processes have no handles to ask yet) or the registry is closing.
func (r *Registry) startLook(backend string, procs []*proc) *portLook {
	slot := r.slotOf(backend)
	if slot == nil {
		return nil
	}
	e := slot.env
	if !e.Capabilities().Ports {
		// The backend cannot see sockets: nothing to wait for, and
		// nothing unknown either.
		l := &portLook{done: make(chan struct{}), backend: backend, procs: procs, res: map[*proc][]int{}}
		for _, p := range procs {
			l.res[p] = nil
		}
		close(l.done)
		return l
	}
	l := &portLook{done: make(chan struct{}), backend: backend, procs: slices.Clone(procs)}
	ok := r.goTracked(func() {
		ctx, _, cancel := r.callCtx(r.ctx, backend, portLookTimeout)
		defer cancel()
		ls, known := r.treeListeners(ctx, e, l.procs)
		res := make(map[*proc][]int, len(l.procs))
		for i, p := range l.procs {
			if known[i] {
				res[p] = portsOf(ls[i])
			}
		}
		r.ports.mu.Lock()
		l.res = res
		if bp := r.ports.byBackend[backend]; bp != nil && bp.looking == l {
			bp.looking, bp.at, bp.known = nil, time.Now(), res
		}
		r.ports.mu.Unlock()
		close(l.done)
	})
	if !ok {
		return nil
	}
	return l
}

// portsOf returns the distinct ports of ls, sorted.
func portsOf(ls []env.Listener) []int {
	var ports []int
	for _, l := range ls {
		if !slices.Contains(ports, l.Port) {
			ports = append(ports, l.Port)
		}
	}
	slices.Sort(ports)
	return ports
}
