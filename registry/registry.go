package registry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/env"
)

// Bounds of the kill procedure beyond the caller's grace period.
const (
	// killExitWait is how long Kill waits for the process to exit after
	// SIGKILL before it reports what it knows.
	killExitWait = 10 * time.Second
	// verifyWait is how long Kill polls Survivors for the tree to vanish.
	verifyWait = 5 * time.Second
	// doneWait bounds the wait for the final state to be recorded (the
	// output stream draining) after the process exited.
	doneWait = 10 * time.Second
	// cleanupTimeout bounds the environment calls that drop a pruned or
	// removed process's state.
	cleanupTimeout = 10 * time.Second
)

// Registry tracks processes across environments: it starts them, copies
// their output into bounded buffers, records their state, ends their trees
// and publishes events. Construct it with New; it is safe for concurrent
// use. Locking is per process: the registry-wide lock only guards the maps
// and is never held while copying output or calling an environment.
type Registry struct {
	cfg   Config
	log   *slog.Logger
	clock Clock

	ctx    context.Context // cancelled by Close; bounds the copying goroutines
	cancel context.CancelFunc
	wg     sync.WaitGroup
	stop   chan struct{} // closed by Close; ends the janitor

	mu     sync.Mutex
	closed bool
	procs  map[string]*proc
	envs   map[string]*envSlot

	ev eventState

	ckpt *checkpointer // nil without Config.StateFile
}

// envSlot is one opened (or opening) environment.
type envSlot struct {
	ready chan struct{} // closed once Open returned
	env   env.Environment
	err   error
}

// New returns a Registry for cfg with defaults filled in. Close it when
// done.
func New(cfg Config) (*Registry, error) {
	if cfg.Open == nil {
		return nil, fmt.Errorf("%w: Config.Open is required: it maps a backend target such as \"local\" to an env.Environment", ErrInvalidOptions)
	}
	if cfg.DefaultBackend == "" {
		cfg.DefaultBackend = DefaultBackend
	}
	if cfg.MaxProcesses <= 0 {
		cfg.MaxProcesses = DefaultMaxProcesses
	}
	if cfg.FinishedTTL <= 0 {
		cfg.FinishedTTL = DefaultFinishedTTL
	}
	if cfg.BufferSize <= 0 {
		cfg.BufferSize = DefaultBufferSize
	}
	if cfg.HeadSize <= 0 {
		cfg.HeadSize = min(DefaultHeadSize, cfg.BufferSize/4)
	}
	if cfg.HeadSize >= cfg.BufferSize {
		return nil, fmt.Errorf("%w: HeadSize %d must be smaller than BufferSize %d", ErrInvalidOptions, cfg.HeadSize, cfg.BufferSize)
	}
	if cfg.DefaultGrace <= 0 {
		cfg.DefaultGrace = DefaultGrace
	}
	if cfg.SubscriptionBuffer <= 0 {
		cfg.SubscriptionBuffer = DefaultSubscriptionBuffer
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Registry{
		cfg:    cfg,
		log:    cfg.Logger.With("component", "registry"),
		clock:  cfg.Clock,
		ctx:    ctx,
		cancel: cancel,
		stop:   make(chan struct{}),
		procs:  make(map[string]*proc),
		envs:   make(map[string]*envSlot),
	}
	r.ev.subs = make(map[*Subscription]struct{})
	if cfg.StateFile != "" {
		r.ckpt = newCheckpointer(r, cfg.StateFile)
		go r.ckpt.run()
	}
	r.wg.Add(1)
	go r.janitor()
	return r, nil
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// janitor prunes finished processes past FinishedTTL even when nobody
// calls the registry.
func (r *Registry) janitor() {
	defer r.wg.Done()
	every := min(max(r.cfg.FinishedTTL/4, 50*time.Millisecond), time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.mu.Lock()
			pruned := r.pruneExpiredLocked(r.clock.Now())
			r.mu.Unlock()
			r.cleanup(pruned)
			if len(pruned) > 0 {
				r.stateChanged()
			}
		}
	}
}

// Close stops the registry's goroutines and closes every environment it
// opened, which kills the processes that were not started detached;
// detached processes keep running in their sandbox. Blocked Wait and
// Subscription.Next calls return ErrClosed. Close is idempotent.
func (r *Registry) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	procs := slices.Collect(maps.Values(r.procs))
	slots := slices.Collect(maps.Values(r.envs))
	r.mu.Unlock()

	close(r.stop)
	r.cancel()
	for _, p := range procs {
		p.closeReader()
	}
	r.wg.Wait()
	r.closeEvents()
	if r.ckpt != nil {
		r.ckpt.close()
	}

	var errs []error
	for _, s := range slots {
		<-s.ready
		if s.env != nil {
			if err := s.env.Close(); err != nil {
				errs = append(errs, fmt.Errorf("registry: close environment %q: %w", s.env.Name(), err))
			}
		}
	}
	return errors.Join(errs...)
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

// proc is one tracked process.
type proc struct {
	r         *Registry
	id        string
	backend   string
	opts      StartOptions // Labels cloned; never mutated
	createdAt time.Time
	buf       *Buffer
	watch     *watcher // nil without patterns; used by the copier only

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

	teeMu sync.Mutex
	tee   io.Writer // Run's live output; nil once Run returned

	killMu sync.Mutex // serialises kill procedures

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
	handle     env.Process
	reader     io.ReadCloser
	killReason State // StateKilled or StateTimedOut once our signal was delivered
	signalling int   // our signals in flight
	leftover   int   // processes of the tree alive after the leader exited
}

func (p *proc) info() Info {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.infoLocked()
}

func (p *proc) infoLocked() Info {
	in := Info{
		ID:            p.id,
		Backend:       p.backend,
		Command:       p.opts.Command,
		Dir:           p.opts.Dir,
		Labels:        maps.Clone(p.opts.Labels),
		State:         p.state,
		PID:           p.pid,
		PTY:           p.opts.PTY != nil,
		Stdin:         p.opts.Stdin,
		Detached:      p.detached,
		Notify:        p.opts.Notify,
		CreatedAt:     p.createdAt,
		StartedAt:     p.startedAt,
		EndedAt:       p.endedTime,
		OutputBytes:   p.buf.Total(),
		Reason:        p.reason,
		TimedOut:      p.timedOut,
		WatchDisabled: p.watchDisabled.Load(),
		Leftover:      p.leftover,
		// What is known to run: a tree not looked at yet since the
		// leader's exit (microseconds on most backends) counts as gone
		// here; decisions that must not be wrong look (liveTree).
		TreeRunning: !p.state.Final() || p.leftover > 0,
	}
	if p.status != nil {
		st := *p.status
		in.Status = &st
	}
	if p.ref != nil {
		ref := *p.ref
		in.Ref = &ref
	}
	return in
}

func (p *proc) closeReader() {
	p.mu.Lock()
	rd := p.reader
	p.mu.Unlock()
	if rd != nil {
		rd.Close()
	}
}

// lookup validates idOrPrefix and returns the process it names.
func (r *Registry) lookup(idOrPrefix string) (*proc, error) {
	h, full, err := parseIDArg(idOrPrefix)
	if err != nil {
		return nil, err
	}
	now := r.clock.Now()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, fmt.Errorf("registry: %s: %w", idOrPrefix, ErrClosed)
	}
	var p *proc
	if full {
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
		return nil, fmt.Errorf("%w: %s: it may have finished more than %s ago and been pruned, or been removed; `corral ps --all` lists the tracked processes",
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
func (r *Registry) Get(idOrPrefix string) (Info, error) {
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

// cleanup drops the environment state of processes no longer tracked.
func (r *Registry) cleanup(pruned []*proc) {
	for _, p := range pruned {
		r.log.Debug("pruned finished process", "id", p.id)
		p.mu.Lock()
		h := p.handle
		p.mu.Unlock()
		if h == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		if err := h.Remove(ctx); err != nil {
			r.log.Debug("remove process state", "id", p.id, "err", err)
			h.Release()
		}
		cancel()
	}
}

// register reserves an ID for p, making room by pruning.
func (r *Registry) register(p *proc) error {
	now := r.clock.Now()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return fmt.Errorf("registry: start: %w", ErrClosed)
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
			return fmt.Errorf("%w: all %d tracked processes are still running: wait for or kill some, or raise MaxProcesses",
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
	r.procs[p.id] = p
	r.mu.Unlock()
	r.cleanup(pruned)
	r.stateChanged()
	return nil
}

// Start starts a background process and returns once it runs. It is
// started detached (it survives the supervisor) when the backend supports
// re-attach and no PTY is asked for.
//
// An invalid option or a full registry returns an error and registers
// nothing. A process the backend could not start is registered in state
// failed (Reason says why) and its Info is returned with the error.
func (r *Registry) Start(ctx context.Context, opts StartOptions) (Info, error) {
	p, err := r.start(ctx, opts, true, nil)
	if p == nil {
		return Info{}, err
	}
	r.checkpointSync()
	return p.info(), err
}

func (r *Registry) start(ctx context.Context, opts StartOptions, detach bool, tee io.Writer) (*proc, error) {
	if opts.Backend == "" {
		opts.Backend = r.cfg.DefaultBackend
	}
	spec := env.Spec{Command: opts.Command, Dir: opts.Dir, Env: slices.Clone(opts.Env), PTY: opts.PTY, Stdin: opts.Stdin}
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
	opts.Labels = maps.Clone(opts.Labels)
	opts.Env = spec.Env
	opts.Watch = slices.Clone(opts.Watch)
	opts.WatchRegex = slices.Clone(opts.WatchRegex)
	if opts.PTY != nil {
		sz := *opts.PTY
		opts.PTY = &sz
		spec.PTY = &sz
	}
	now := r.clock.Now()
	p := &proc{
		r:         r,
		backend:   opts.Backend,
		opts:      opts,
		createdAt: now,
		buf:       NewBuffer(r.cfg.BufferSize, r.cfg.HeadSize),
		watch:     w,
		started:   make(chan struct{}),
		done:      make(chan struct{}),
		treeDone:  make(chan struct{}),
		treeKick:  make(chan struct{}, 1),
		state:     StateStarting,
		tee:       tee,
	}
	p.cond.L = &p.mu
	p.treeLive.Store(true)
	if err := r.register(p); err != nil {
		return nil, err
	}
	spec.Tag = p.id

	e, err := r.environment(ctx, opts.Backend)
	if err != nil {
		p.fail(err)
		return p, err
	}
	caps := e.Capabilities()
	if detach && caps.Reattach && (spec.PTY == nil || caps.ReattachPTY) {
		spec.Detach = true
	}
	p.replay = caps.ReplayOutput || spec.Detach
	h, err := e.Start(ctx, spec)
	if err != nil {
		err = fmt.Errorf("registry: start %s on %q: %w", p.id, opts.Backend, err)
		p.fail(err)
		return p, err
	}
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

	startedAt := r.clock.Now()
	p.lastOutput.Store(time.Now().UnixNano())
	p.mu.Lock()
	p.state, p.startedAt, p.pid, p.handle, p.ref, p.detached = StateRunning, startedAt, h.PID(), h, ref, spec.Detach
	p.mu.Unlock()
	close(p.started)
	r.stateChanged()
	r.log.Debug("started", "id", p.id, "backend", opts.Backend, "pid", h.PID(), "detached", spec.Detach)
	go p.monitor()
	r.publish(Event{Type: EventStarted, ID: p.id, Command: opts.Command, State: StateRunning,
		Summary: fmt.Sprintf("%s started: %s", p.id, clip(opts.Command, 200))})
	return p, nil
}

// fail records that the process could not be started.
func (p *proc) fail(err error) {
	now := p.r.clock.Now()
	p.mu.Lock()
	p.state, p.reason, p.endedTime = StateFailed, err.Error(), now
	p.mu.Unlock()
	p.endedAt.Store(now.UnixNano())
	close(p.started)
	close(p.done)
	p.treeGone()
	p.r.stateChanged()
	p.r.log.Debug("start failed", "id", p.id, "err", err)
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
		p.publishHits(p.watch.feed(nil, p.r.clock.Now, true))
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
	p.finish(st, lost)
	if lost != nil {
		p.treeGone()
		return
	}
	p.followTree(ctx, h)
}

// followTree watches what the leader left running after its exit (`cmd
// &`, a server that daemonised): it counts it (Info.Leftover), collects
// the output it writes where the backend can replay output, and closes
// treeDone once nothing of the tree is left. It polls Survivors, fast at
// first and then once a second; a signal of ours wakes it at once.
func (p *proc) followTree(ctx context.Context, h env.Process) {
	defer p.treeGone()
	delay := 10 * time.Millisecond
	for {
		surv, err := h.Survivors(ctx)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, env.ErrReleased) {
				p.r.log.Warn("cannot follow the tree after its leader exited", "id", p.id, "err", err)
			}
			return
		}
		if p.setLeftover(len(surv)) {
			p.r.stateChanged()
		}
		if p.replay {
			p.catchUp(ctx, h)
		}
		if len(surv) == 0 {
			return
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
			delay = min(2*delay, time.Second)
		case <-p.treeKick:
			t.Stop()
			delay = 10 * time.Millisecond
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// setLeftover records n leftover processes and reports a change.
func (p *proc) setLeftover(n int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	changed := p.leftover != n
	p.leftover = n
	return changed
}

// catchUp copies what the tree wrote since the buffer's end: a stream
// re-opened after the exit ends at the output written so far.
func (p *proc) catchUp(ctx context.Context, h env.Process) {
	rd, err := h.Output(ctx, p.buf.Total())
	if err != nil {
		p.r.log.Debug("re-open output after the exit", "id", p.id, "err", err)
		return
	}
	defer rd.Close()
	if err := p.copyOutput(rd); err != nil && ctx.Err() == nil {
		p.r.log.Debug("output after the exit", "id", p.id, "err", err)
	}
}

// treeGone records that nothing of the tree is left (or that nobody can
// know any more). Idempotent.
func (p *proc) treeGone() {
	if !p.treeLive.CompareAndSwap(true, false) {
		return
	}
	p.mu.Lock()
	changed := p.leftover != 0
	p.leftover = 0
	p.mu.Unlock()
	close(p.treeDone)
	if changed {
		p.r.stateChanged()
	}
}

// liveTree returns how many processes of a finished process's tree still
// run, looking now rather than trusting followTree's last look, which may
// not have happened yet right after the exit.
func (p *proc) liveTree(ctx context.Context) int {
	if !p.treeLive.Load() {
		return 0
	}
	p.mu.Lock()
	h := p.handle
	p.mu.Unlock()
	if h == nil {
		return 0
	}
	surv, err := h.Survivors(ctx)
	if err != nil {
		// Cannot tell: refuse rather than forget a running tree.
		p.r.log.Debug("survivors of a finished process", "id", p.id, "err", err)
		return max(1, p.info().Leftover)
	}
	if len(surv) == 0 {
		p.treeGone()
	}
	return len(surv)
}

// kickTree makes followTree look again now.
func (p *proc) kickTree() {
	select {
	case p.treeKick <- struct{}{}:
	default:
	}
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
		p.publishHits(p.watch.feed(b, p.r.clock.Now, false))
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
		p.r.publish(ev)
	}
}

// finish records the final state. lost, when non-nil, says why the exit
// status is unknown.
func (p *proc) finish(st env.ExitStatus, lost error) {
	now := p.r.clock.Now()
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
		p.status = &st
	default:
		p.state = StateExited
		p.status = &st
	}
	p.endedTime = now
	p.reader = nil
	in := p.infoLocked()
	p.mu.Unlock()
	p.endedAt.Store(now.UnixNano())
	close(p.done)
	p.r.stateChanged()
	p.r.log.Debug("finished", "id", p.id, "state", in.State, "status", in.Status)

	p.r.publish(p.exitedEvent(in))
}

// Poll returns the process's state and the output from byte cursor since
// on (what the buffer still holds: see PollResult). It does not block.
// Pass the returned Next as since to get only new output next time.
func (r *Registry) Poll(ctx context.Context, id string, since int64) (PollResult, error) {
	p, err := r.lookup(id)
	if err != nil {
		return PollResult{}, err
	}
	// The state is read before the output: a final state guarantees the
	// output read after it is complete.
	in := p.info()
	c := p.buf.ReadSince(since)
	in.OutputBytes = c.Next
	if in.State.Final() {
		p.finalSeen.Store(true)
	}
	return PollResult{Info: in, Output: c.Data, OmittedBytes: c.Omitted, OmittedAt: c.OmittedAt, Next: c.Next}, nil
}

// Wait blocks until the process reaches a final state and returns its
// Info. timeout 0 waits until ctx is done. When the timeout elapses first
// the error matches ErrWaitTimeout and the Info is the current snapshot.
// It returns when the leader exits, even if the leader left part of its
// tree running (Info.Leftover); WaitTree waits for that too.
func (r *Registry) Wait(ctx context.Context, id string, timeout time.Duration) (Info, error) {
	return r.wait(ctx, id, timeout, false)
}

// WaitTree is Wait until the leader exited and nothing of its tree is
// left: a daemonised server, a `cmd &` the command did not wait for.
func (r *Registry) WaitTree(ctx context.Context, id string, timeout time.Duration) (Info, error) {
	return r.wait(ctx, id, timeout, true)
}

func (r *Registry) wait(ctx context.Context, id string, timeout time.Duration, tree bool) (Info, error) {
	p, err := r.lookup(id)
	if err != nil {
		return Info{}, err
	}
	done, what := p.done, "still"
	if tree {
		done, what = p.treeDone, "or its tree still"
	}
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	} else if timeout < 0 {
		return Info{}, fmt.Errorf("%w: negative wait timeout %s", ErrInvalidOptions, timeout)
	}
	p.enterWait()
	// Logged once counted: from this line on, the end is this caller's
	// and its exited event will not be delivered.
	r.log.Debug("wait: blocked until the process ends", "id", p.id)
	var err2 error
	select {
	case <-done:
	case <-timer:
		err2 = fmt.Errorf("%w: %s %s %s after %s; wait again, or kill it", ErrWaitTimeout, p.id, what, runningWords(p.info()), timeout)
	case <-ctx.Done():
		err2 = ctx.Err()
	case <-r.ctx.Done():
		err2 = fmt.Errorf("registry: wait %s: %w", p.id, ErrClosed)
	}
	if p.leaveWait() && (!tree || !p.treeLive.Load()) {
		// Ended, even if a timeout fired at the same moment: the caller
		// gets the result, which its exited event then no longer repeats.
		return p.info(), nil
	}
	return p.info(), err2
}

// runningWords says what still runs of a process, for messages: its
// state, or how many processes its exited leader left running.
func runningWords(in Info) string {
	if in.State.Final() && in.TreeRunning {
		return fmt.Sprintf("running (%s, %d left running)", in.State, in.Leftover)
	}
	return string(in.State)
}

// Kill ends the process's tree: opts.Signal (default TERM; KILL when
// Force), then SIGKILL to whatever of the tree is still alive after the
// grace period (default Config.DefaultGrace), then verification through
// Process.Survivors. The process's final state is killed, whatever status
// it reports. With NoEscalate there is no SIGKILL: Kill waits up to the
// grace and reports whether the tree ended (KillResult.StillRunning).
//
// Kills of one process are serialised. A Kill that finds the leader
// already finished — on its own, or by an earlier Kill — reports
// AlreadyExited with the real status; what the leader left running is
// still signalled the same way, and counted in Ended.
func (r *Registry) Kill(ctx context.Context, id string, opts KillOptions) (KillResult, error) {
	p, err := r.lookup(id)
	if err != nil {
		return KillResult{}, err
	}
	sig, grace, err := r.killParams(opts.Signal, opts.Grace)
	if err != nil {
		return KillResult{}, err
	}
	if opts.Force {
		if opts.NoEscalate {
			return KillResult{}, fmt.Errorf("%w: force and no-escalate contradict each other: force sends SIGKILL at once", ErrInvalidOptions)
		}
		sig = env.SIGKILL
	}
	return p.kill(ctx, killPlan{sig: sig, grace: grace, escalate: !opts.NoEscalate, reason: StateKilled})
}

func (r *Registry) killParams(sig env.Signal, grace time.Duration) (env.Signal, time.Duration, error) {
	if sig == "" {
		sig = env.SIGTERM
	}
	if !sig.Valid() {
		return "", 0, fmt.Errorf("%w: unknown signal %q: use a name such as TERM, INT, HUP or KILL", ErrInvalidOptions, sig)
	}
	if grace < 0 {
		return "", 0, fmt.Errorf("%w: negative grace period %s", ErrInvalidOptions, grace)
	}
	if grace == 0 {
		grace = r.cfg.DefaultGrace
	}
	return sig, grace, nil
}

// killPlan is one kill procedure: the first signal, the grace before
// SIGKILL (or, without escalate, before giving up), and the final state to
// record when the kill ends the leader.
type killPlan struct {
	sig      env.Signal
	grace    time.Duration
	escalate bool
	reason   State  // StateKilled or StateTimedOut
	timedOut string // with StateTimedOut: which timeout
}

// kill runs plan against p's whole tree: the leader while it runs, and
// what it left running after it exited.
func (p *proc) kill(ctx context.Context, plan killPlan) (KillResult, error) {
	res := KillResult{ID: p.id}
	select {
	case <-p.started:
	case <-ctx.Done():
		return res, fmt.Errorf("registry: kill %s: %w", p.id, ctx.Err())
	}
	p.killMu.Lock()
	defer p.killMu.Unlock()

	p.mu.Lock()
	h := p.handle
	leaderDone := p.state.Final()
	if leaderDone {
		res.AlreadyExited, res.State, res.Status = true, p.state, copyStatus(p.status)
		if h == nil || !p.treeLive.Load() {
			p.mu.Unlock()
			return res, nil
		}
	} else {
		p.signalling++
	}
	p.mu.Unlock()

	// Counted before the signal, so that Ended covers everything the kill
	// ends; a backend that cannot tell yields 0 and a lower bound.
	before, _ := h.Survivors(ctx)
	err := h.Signal(ctx, plan.sig)
	if !leaderDone {
		p.mu.Lock()
		p.signalling--
		if err == nil && p.killReason == "" {
			p.killReason, p.timedOut = plan.reason, plan.timedOut
		}
		p.cond.Broadcast()
		p.mu.Unlock()
		if err == nil {
			p.r.stateChanged()
		}
	}
	defer p.kickTree()
	if errors.Is(err, env.ErrExited) {
		// The leader ended before the signal got there (or had ended);
		// the signal still went to what it left running.
		if !leaderDone {
			p.awaitDone(ctx)
			in := p.info()
			res.AlreadyExited, res.State, res.Status = true, in.State, in.Status
		}
		if len(before) == 0 {
			return res, nil
		}
	} else if err != nil {
		return res, fmt.Errorf("registry: kill %s: send %s: %w", p.id, plan.sig, err)
	}
	res.Signal = plan.sig
	p.r.log.Debug("signalled", "id", p.id, "signal", plan.sig, "processes", len(before))

	if plan.sig != env.SIGKILL && !waitTreeGone(ctx, h, plan.grace) {
		if ctx.Err() != nil {
			return res, fmt.Errorf("registry: kill %s: %w", p.id, ctx.Err())
		}
		if !plan.escalate {
			return p.leftRunning(ctx, h, res, before)
		}
		// The leader may have died of the first signal while others
		// ignored it: SIGKILL then reaches them with ErrExited, and it is
		// an escalation all the same.
		switch err := h.Signal(ctx, env.SIGKILL); {
		case err == nil || errors.Is(err, env.ErrExited):
			res.Escalated = true
			p.r.log.Debug("escalated to SIGKILL", "id", p.id, "grace", plan.grace)
		default:
			return res, fmt.Errorf("registry: kill %s: send KILL after %s grace: %w", p.id, plan.grace, err)
		}
	}
	waitExit(ctx, h, killExitWait)

	// Verify: nothing of the tree may be left, escapees included.
	survivors, err := p.verify(ctx, h, &res)
	res.Survivors = survivors
	res.Ended = max(0, len(before)-len(survivors))
	if err != nil {
		p.r.log.Warn("kill verification failed", "id", p.id, "err", err)
	}
	p.awaitDone(ctx)
	if !res.AlreadyExited {
		in := p.info()
		res.State, res.Status = in.State, in.Status
	}
	if len(res.Survivors) > 0 {
		return res, fmt.Errorf("registry: kill %s: %d processes of the tree survived: %v", p.id, len(res.Survivors), res.Survivors)
	}
	return res, nil
}

// leftRunning finishes a kill without escalation whose grace passed with
// part of the tree alive. A leader that is still running was only
// signalled, not killed: should it exit later, that is its own exit.
func (p *proc) leftRunning(ctx context.Context, h env.Process, res KillResult, before []int) (KillResult, error) {
	res.StillRunning = true
	p.mu.Lock()
	if !p.state.Final() {
		p.killReason, p.timedOut = "", ""
	}
	in := p.infoLocked()
	p.mu.Unlock()
	p.r.stateChanged()
	if !res.AlreadyExited {
		res.State, res.Status = in.State, in.Status
	}
	if now, err := h.Survivors(ctx); err == nil {
		res.Ended = max(0, len(before)-len(now))
	}
	return res, nil
}

// verify polls Survivors until the tree is gone or verifyWait passed,
// sending SIGKILL once to what is left.
func (p *proc) verify(ctx context.Context, h env.Process, res *KillResult) ([]int, error) {
	killed := res.Escalated || res.Signal == env.SIGKILL
	return pollSurvivors(ctx, h, time.Now().Add(verifyWait), func() {
		if killed {
			return
		}
		killed = true
		if err := h.Signal(ctx, env.SIGKILL); err == nil || errors.Is(err, env.ErrExited) {
			res.Escalated = true
		}
	})
}

// waitTreeGone waits up to d for the process to exit and then for the rest
// of its tree to go: the grace period is for every process that got the
// polite signal, not only the leader. A leader that dies at once while its
// descendants clean up (or ignore the signal) must not cut their grace.
func waitTreeGone(ctx context.Context, h env.Process, d time.Duration) bool {
	deadline := time.Now().Add(d)
	if !waitExit(ctx, h, d) {
		return false
	}
	s, err := pollSurvivors(ctx, h, deadline, nil)
	if ctx.Err() != nil {
		return false
	}
	return err != nil || len(s) == 0 // verify reports what an error hides
}

// pollSurvivors polls h.Survivors, backing off from 10 ms to 200 ms, until
// the tree is gone (nil, nil), Survivors fails (nil, err), until passes
// (what is left, nil) or ctx is done (what is left, ctx.Err()). onLeft,
// when set, runs after each poll that found survivors.
func pollSurvivors(ctx context.Context, h env.Process, until time.Time, onLeft func()) ([]int, error) {
	interval := 10 * time.Millisecond
	for {
		s, err := h.Survivors(ctx)
		if err != nil {
			return nil, err
		}
		if len(s) == 0 {
			return nil, nil
		}
		if onLeft != nil {
			onLeft()
		}
		left := time.Until(until)
		if left <= 0 {
			return s, nil
		}
		t := time.NewTimer(min(interval, left))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return s, ctx.Err()
		}
		interval = min(2*interval, 200*time.Millisecond)
	}
}

// waitExit waits up to d for the process to exit.
func waitExit(ctx context.Context, h env.Process, d time.Duration) bool {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	_, err := h.Wait(wctx)
	return err == nil || wctx.Err() == nil
}

// awaitDone waits, bounded, for the final state to be recorded.
func (p *proc) awaitDone(ctx context.Context) {
	t := time.NewTimer(doneWait)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
	case <-ctx.Done():
	case <-p.r.ctx.Done():
	}
}

func copyStatus(s *env.ExitStatus) *env.ExitStatus {
	if s == nil {
		return nil
	}
	c := *s
	return &c
}

// KillAll kills, concurrently, every running process carrying all of
// opts.Labels (every running process when Labels is empty). Results are
// sorted by ID; errors of individual kills are joined.
func (r *Registry) KillAll(ctx context.Context, opts KillAllOptions) ([]KillResult, error) {
	sig, grace, err := r.killParams(opts.Signal, opts.Grace)
	if err != nil {
		return nil, err
	}
	// selectProcs's default selection: running, or exited with part of
	// the tree still running.
	targets := r.selectProcs(ListOptions{Labels: opts.Labels})
	results := make([]KillResult, len(targets))
	errs := make([]error, len(targets))
	finished := make([]bool, len(targets))
	var wg sync.WaitGroup
	for i, p := range targets {
		finished[i] = p.endedAt.Load() != 0
		wg.Go(func() {
			results[i], errs[i] = p.kill(ctx, killPlan{sig: sig, grace: grace, escalate: !opts.NoEscalate, reason: StateKilled})
			results[i].ID = p.id
		})
	}
	wg.Wait()
	// A process that had finished before the selection and turned out to
	// have nothing left to signal (its tree was not looked at yet) is not
	// part of what KillAll did.
	kept := results[:0]
	for i, res := range results {
		if finished[i] && res.Signal == "" && errs[i] == nil {
			continue
		}
		kept = append(kept, res)
	}
	return kept, errors.Join(errs...)
}

// List returns snapshots of the processes opts selects, oldest first.
func (r *Registry) List(opts ListOptions) []Info {
	procs := r.selectProcs(opts)
	out := make([]Info, 0, len(procs))
	for _, p := range procs {
		in := p.info()
		if matchState(in, opts) {
			out = append(out, in)
		}
	}
	return out
}

// selectProcs returns the processes matching opts's labels and backend and
// (by a racy first look, rechecked by List) state, oldest first.
func (r *Registry) selectProcs(opts ListOptions) []*proc {
	now := r.clock.Now()
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
		return cmp.Or(a.createdAt.Compare(b.createdAt), cmp.Compare(a.id, b.id))
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
		return fmt.Errorf("%w: %s is %s: kill it first (corral kill %s)", ErrRunning, p.id, p.info().State, p.id)
	}
	if n := p.liveTree(ctx); n > 0 {
		return fmt.Errorf("%w: %s %s, but %d processes of its tree still run: kill them first (corral kill %s), or remove with force",
			ErrRunning, p.id, p.info().State, n, p.id)
	}
	r.mu.Lock()
	if r.procs[p.id] == p {
		delete(r.procs, p.id)
	}
	r.mu.Unlock()
	r.stateChanged()
	p.mu.Lock()
	h := p.handle
	p.mu.Unlock()
	if h != nil {
		if err := h.Remove(ctx); err != nil {
			h.Release()
			return fmt.Errorf("registry: remove %s: forgotten, but its state in the sandbox was not deleted: %w", p.id, err)
		}
	}
	return nil
}

// Write writes data to the process's stdin. The process must be running
// and have been started with Stdin (or a PTY).
func (r *Registry) Write(ctx context.Context, id string, data []byte) error {
	p, h, err := r.running(id, "write to")
	if err != nil {
		return err
	}
	if _, err := h.Write(ctx, data); err != nil {
		return p.stdinErr("write to", err)
	}
	return nil
}

// Submit writes line followed by the key that submits it: "\r" (Enter) on
// a PTY, "\n" on a pipe.
func (r *Registry) Submit(ctx context.Context, id, line string) error {
	p, h, err := r.running(id, "submit to")
	if err != nil {
		return err
	}
	term := "\n"
	if p.opts.PTY != nil {
		term = "\r"
	}
	if _, err := h.Write(ctx, []byte(line+term)); err != nil {
		return p.stdinErr("submit to", err)
	}
	return nil
}

// Resize changes the terminal size of a process started with a PTY, also
// one re-attached after a restart. It fails with ErrInvalidOptions for a
// size of zero and with ErrNotRunning once the process has ended.
func (r *Registry) Resize(ctx context.Context, id string, size env.WindowSize) error {
	if size.Rows == 0 || size.Cols == 0 {
		return fmt.Errorf("%w: window size %dx%d: rows and columns must both be at least 1", ErrInvalidOptions, size.Rows, size.Cols)
	}
	p, h, err := r.running(id, "resize")
	if err != nil {
		return err
	}
	if p.opts.PTY == nil {
		return fmt.Errorf("%w: resize %s: it has no terminal (start it with a PTY)", ErrInvalidOptions, p.id)
	}
	if err := h.Resize(ctx, size); err != nil {
		if errors.Is(err, env.ErrExited) {
			return fmt.Errorf("registry: resize %s: %w: %w", p.id, ErrNotRunning, err)
		}
		return fmt.Errorf("registry: resize %s: %w", p.id, err)
	}
	return nil
}

// CloseStdin closes the process's stdin so it reads EOF.
func (r *Registry) CloseStdin(ctx context.Context, id string) error {
	p, h, err := r.running(id, "close stdin of")
	if err != nil {
		return err
	}
	if err := h.CloseStdin(ctx); err != nil {
		return p.stdinErr("close stdin of", err)
	}
	return nil
}

func (r *Registry) running(id, op string) (*proc, env.Process, error) {
	p, err := r.lookup(id)
	if err != nil {
		return nil, nil, err
	}
	p.mu.Lock()
	state, h := p.state, p.handle
	p.mu.Unlock()
	if state != StateRunning {
		return nil, nil, fmt.Errorf("%w: cannot %s %s: it is %s", ErrNotRunning, op, p.id, state)
	}
	return p, h, nil
}

func (p *proc) stdinErr(op string, err error) error {
	switch {
	case errors.Is(err, env.ErrExited):
		return fmt.Errorf("registry: %s %s: %w: %w", op, p.id, ErrNotRunning, err)
	case errors.Is(err, env.ErrStdinClosed):
		return fmt.Errorf("registry: %s %s: %w (start it with stdin enabled, and do not close stdin before writing)", op, p.id, err)
	}
	return fmt.Errorf("registry: %s %s: %w", op, p.id, err)
}
