package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"
)

// Registry tracks processes across environments: it starts them, copies
// their output into bounded buffers, records their state, ends their trees
// and publishes events. Construct it with New; it is safe for concurrent
// use. Locking is per process: the registry-wide lock only guards the maps
// and is never held while copying output or calling an environment.
type Registry struct {
	cfg Config
	log *slog.Logger

	ctx    context.Context // cancelled by Close; bounds the copying goroutines
	cancel context.CancelFunc
	wg     sync.WaitGroup
	stop   chan struct{} // closed by Close; ends the janitor

	mu     sync.Mutex
	closed bool
	procs  map[string]*proc
	envs   map[string]*envSlot
	gone   map[string]GoneInfo // targets whose sandbox vanished, until opened again
	admits uint64              // processes ever admitted to procs; see proc.admitted
	// sessions are the open sessions and those a restart waits for
	// (session.go).
	sessions map[string]*session

	ev      *eventBus
	changes changeSignal
	ports   portCache // ListOptions.Ports's looks (ports.go)

	ckpt *checkpointer // nil without Config.StateFile
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
	if err := cfg.Runaway.Validate(); err != nil {
		return nil, err
	}
	cfg.Runaway = copyRunaway(cfg.Runaway)
	if cfg.SubscriptionBuffer <= 0 {
		cfg.SubscriptionBuffer = DefaultSubscriptionBuffer
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SessionReclaim <= 0 {
		cfg.SessionReclaim = DefaultSessionReclaim
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Registry{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "registry"),
		ctx:      ctx,
		cancel:   cancel,
		stop:     make(chan struct{}),
		procs:    make(map[string]*proc),
		envs:     make(map[string]*envSlot),
		gone:     make(map[string]GoneInfo),
		sessions: make(map[string]*session),
	}
	r.ev = newEventBus(r.log, cfg.SubscriptionBuffer)
	if cfg.StateFile != "" {
		r.ckpt = newCheckpointer(r, cfg.StateFile)
		go r.ckpt.run()
	}
	r.wg.Add(1)
	go r.janitor()
	return r, nil
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
			pruned := r.pruneExpiredLocked(time.Now())
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
	r.ev.close()
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

// goTracked runs fn in a goroutine that Close waits for, unless the
// registry is closed, in which case fn does not run and goTracked reports
// false.
func (r *Registry) goTracked(fn func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.wg.Go(fn)
	return true
}
