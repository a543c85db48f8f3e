package registry

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/corralhq/corral/env"
)

// Checkpointing.
//
// With Config.StateFile set, the registry writes every tracked process to
// that file whenever a process's state changes (registered, running,
// failed, signalled by a kill, finished, removed, pruned). Writes are
// atomic — a temporary file in the same directory, fsync, rename over the
// state file, fsync of the directory — so a crash at any moment leaves
// either the previous or the new version, never a torn one.
//
// Bursts are coalesced: a change only marks the state dirty and wakes one
// writer goroutine, which writes the snapshot of that moment and then
// waits CheckpointInterval before it looks again. A change that arrives
// while a write is in progress marks the state dirty again, so the last
// change is always written (at most CheckpointInterval plus one write
// later), and Close writes a final snapshot after the copying goroutines
// stopped.

// CheckpointInterval is the minimum time between two checkpoint writes.
const CheckpointInterval = 50 * time.Millisecond

// checkpointVersion is the format version of the state file.
const checkpointVersion = 1

// checkpointFile is the state file's content.
type checkpointFile struct {
	Version   int                `json:"version"`
	SavedAt   time.Time          `json:"saved_at"`
	Processes []checkpointRecord `json:"processes"`
}

// checkpointRecord is one process as the state file keeps it. It is its
// own type, not Info: the file outlives a release, so the API's view may
// rename or drop a field without breaking a state file written before,
// and the record holds what recovery needs and agents never see (the
// backend-private Ref, the watch patterns, the kill in progress). The
// JSON names are the format: change one only with checkpointVersion.
// Environment variables are not stored: they may hold secrets, and a
// re-attached process needs none.
type checkpointRecord struct {
	ID          string            `json:"id"`
	Backend     string            `json:"backend"`
	Command     string            `json:"command"`
	Dir         string            `json:"dir,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	State       State             `json:"state"`
	PID         int               `json:"pid,omitempty"`
	PTY         bool              `json:"pty,omitempty"`
	Stdin       bool              `json:"stdin,omitempty"`
	Detached    bool              `json:"detached,omitempty"`
	Foreground  bool              `json:"foreground,omitempty"`
	Notify      bool              `json:"notify,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	StartedAt   time.Time         `json:"started_at,omitzero"`
	EndedAt     time.Time         `json:"ended_at,omitzero"`
	Status      *env.ExitStatus   `json:"status,omitempty"`
	OutputBytes int64             `json:"output_bytes"`
	Reason      string            `json:"reason,omitempty"`
	// Session is StartOptions.Session: a restarted registry waits for the
	// session's front end to open it again (Config.SessionReclaim).
	Session string `json:"session,omitempty"`
	// TimedOut is kept only once the process is final: a timeout that
	// had not ended it yet is the dead supervisor's, not the process's.
	TimedOut      string   `json:"timed_out,omitempty"`
	Ref           *env.Ref `json:"ref,omitempty"`
	WatchDisabled bool     `json:"watch_disabled,omitempty"`
	Leftover      int      `json:"leftover,omitempty"`
	TreeRunning   bool     `json:"tree_running,omitempty"`

	Watch      []string        `json:"watch,omitempty"`
	WatchRegex []string        `json:"watch_regex,omitempty"`
	PTYSize    *env.WindowSize `json:"pty_size,omitempty"`
	// KillReason is set once a kill's signal was delivered: the process
	// is then reported killed (or timed_out) however it ends, also when
	// it ends while no supervisor runs.
	KillReason State `json:"kill_reason,omitempty"`

	// Dev-server options (StartOptions.Name, Ready, TTL, IdleTimeout) and
	// progress: a restarted registry keeps the name, re-arms the readiness
	// watch of a process not ready yet (one ready stays ready) and the
	// deadlines (the TTL still counts from StartedAt). EnvDigest stands
	// for the environment, which is not stored, so that a named start
	// after the restart can still tell the same command. Durations are
	// nanoseconds. Absent from files written before, which is their zero.
	Name        string        `json:"name,omitempty"`
	EnvDigest   string        `json:"env_digest,omitempty"`
	Ready       *ReadyOptions `json:"ready,omitempty"`
	ReadyAt     time.Time     `json:"ready_at,omitzero"`
	TTL         time.Duration `json:"ttl,omitempty"`
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`

	// PendingKill is a kill its backend did not answer, which the next
	// registry runs once the backend answers (kill.go).
	PendingKill *pendingKillRecord `json:"pending_kill,omitempty"`
	// Key is StartOptions.Key: a caller that repeats a Start after a
	// restart finds the process by it.
	Key string `json:"key,omitempty"`
	// Limits are StartOptions.Limits, so the next registry still names
	// the memory limit of a process the OOM killer ended.
	Limits *env.Limits `json:"limits,omitempty"`
	// Runaway are StartOptions.Runaway, so the process keeps its own
	// thresholds across a restart.
	Runaway *RunawayOptions `json:"runaway,omitempty"`
}

// recordLocked returns p's checkpoint record; the caller holds p.mu.
//
// The state recorded is not always Info's. A Start not yet confirmed to
// its caller is recorded as starting, also once it runs (with its Ref):
// the next registry ends such a start, so a caller whose start failed
// because the supervisor died finds nothing of it running. A process
// still recovering is recorded in the state it was recovered from, so a
// crash during the recovery leaves the next registry the same work.
func (p *proc) recordLocked() checkpointRecord {
	in := p.infoLocked()
	state := in.State
	switch {
	case state == StateRecovering:
		state = p.recoverFrom
	case state == StateRunning && p.unconfirmed:
		state = StateStarting
	}
	rec := checkpointRecord{
		ID: in.ID, Backend: in.Backend, Command: in.Command, Dir: in.Dir, Labels: in.Labels,
		State: state, PID: in.PID, PTY: in.PTY, Stdin: in.Stdin, Detached: in.Detached, Foreground: in.Foreground, Notify: in.Notify,
		CreatedAt: in.CreatedAt, StartedAt: in.StartedAt, EndedAt: in.EndedAt,
		Status: in.Status, OutputBytes: in.OutputBytes, Reason: in.Reason, Session: in.Session,
		WatchDisabled: in.WatchDisabled, Leftover: in.Leftover, TreeRunning: in.TreeRunning,
		Watch: p.opts.Watch, WatchRegex: p.opts.WatchRegex, PTYSize: p.opts.PTY, KillReason: p.killReason,
		Name: in.Name, EnvDigest: p.envDigest, Ready: in.Ready, ReadyAt: in.ReadyAt, TTL: p.opts.TTL, IdleTimeout: p.opts.IdleTimeout,
		Key: p.opts.Key, Limits: in.Limits, Runaway: in.RunawayOptions,
	}
	if in.State.Final() {
		rec.TimedOut = in.TimedOut
	}
	rec.PendingKill = p.pending.record()
	if p.ref != nil {
		ref := *p.ref
		rec.Ref = &ref
	}
	return rec
}

// checkpointer writes the registry's state file.
type checkpointer struct {
	r      *Registry
	path   string
	wake   chan struct{} // capacity 1: "dirty"
	urgent chan struct{} // capacity 1: a caller waits in sync; skip the interval
	stop   chan struct{}
	done   chan struct{}

	mu      sync.Mutex // serialises writes (loop and final flush)
	written *sync.Cond // on mu: a write completed
	enabled bool       // false until Recover ran, so nothing overwrites a file not yet read
	closed  bool
	begun   uint64 // writes whose snapshot was taken
	ended   uint64 // writes completed (successfully or not)
	writes  int64
	lastErr error
}

func newCheckpointer(r *Registry, path string) *checkpointer {
	c := &checkpointer{r: r, path: path, wake: make(chan struct{}, 1), urgent: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	c.written = sync.NewCond(&c.mu)
	return c
}

// checkpointSync returns once a checkpoint that includes every change made
// before the call is on disk, or with the error of the write that failed
// to put it there (also logged). Start uses it twice: before anything
// runs, so that a supervisor crashing during the start leaves a record
// the next one sweeps for (recover.go), and before an ID is handed to a
// client, which must survive a crash the next moment. Concurrent callers
// share writes. Without a state file, or before Recover, it returns nil
// at once.
func (r *Registry) checkpointSync() error {
	c := r.ckpt
	if c == nil {
		return nil
	}
	c.mu.Lock()
	if !c.enabled || c.closed {
		c.mu.Unlock()
		return nil
	}
	// A write already under way may have taken its snapshot before our
	// change: only one that begins after this point counts.
	want := c.begun + 1
	c.mu.Unlock()
	select {
	case c.urgent <- struct{}{}:
	default:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.ended < want && !c.closed {
		c.written.Wait()
	}
	if c.ended < want {
		return nil // closed: Close's own write is the last word
	}
	// Every write from want on includes the change: the latest one's
	// outcome is what the file holds now.
	return c.lastErr
}

// stateChanged records that some process's state changed. Cheap and
// non-blocking; a no-op without a StateFile.
func (r *Registry) stateChanged() {
	r.changes.notify()
	if r.ckpt == nil {
		return
	}
	select {
	case r.ckpt.wake <- struct{}{}:
	default:
	}
}

func (c *checkpointer) run() {
	defer close(c.done)
	for {
		select {
		case <-c.stop:
			return
		case <-c.wake:
		case <-c.urgent:
		}
		c.write()
		t := time.NewTimer(CheckpointInterval)
		select {
		case <-c.stop:
			t.Stop()
			return
		case <-t.C:
		case <-c.urgent:
			// Someone waits for durability: write again at once.
			t.Stop()
			select {
			case c.wake <- struct{}{}:
			default:
			}
		}
	}
}

// write writes a snapshot if checkpointing is enabled; errors are logged
// (a full disk must not stop the registry) and kept for CheckpointStats.
func (c *checkpointer) write() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.enabled {
		return
	}
	c.begun++
	gen := c.begun
	defer func() {
		c.ended = gen
		c.written.Broadcast()
	}()
	err := writeFileAtomic(c.path, c.r.snapshot())
	c.lastErr = err
	if err != nil {
		c.r.log.Error("checkpoint failed; the state file keeps its previous version", "path", c.path, "err", err)
		return
	}
	c.writes++
}

// close stops the writer and writes the final snapshot.
func (c *checkpointer) close() {
	close(c.stop)
	<-c.done
	c.write()
	c.mu.Lock()
	c.closed = true
	c.written.Broadcast()
	c.mu.Unlock()
}

// snapshot serialises every tracked process, oldest first.
func (r *Registry) snapshot() []byte {
	r.mu.Lock()
	procs := make([]*proc, 0, len(r.procs))
	for _, p := range r.procs {
		procs = append(procs, p)
	}
	r.mu.Unlock()
	f := checkpointFile{Version: checkpointVersion, SavedAt: time.Now().UTC(), Processes: make([]checkpointRecord, 0, len(procs))}
	for _, p := range procs {
		f.Processes = append(f.Processes, p.record())
	}
	slices.SortFunc(f.Processes, func(a, b checkpointRecord) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		if a.ID < b.ID {
			return -1
		}
		return 1
	})
	// Compact: indenting is one more pass over every byte, 6 % of the
	// daemon's CPU under 200 concurrent runs with a thousand records
	// (finished processes are kept until pruned); the file is the
	// registry's, not a person's (corral ps --json is theirs).
	b, err := json.Marshal(f)
	if err != nil {
		// Info is plain data; this cannot happen.
		panic(fmt.Sprintf("registry: marshal checkpoint: %v", err))
	}
	return append(b, '\n')
}

// CheckpointStats reports how many checkpoints were written and the error
// of the last attempt (nil when it succeeded or none was made).
func (r *Registry) CheckpointStats() (writes int64, lastErr error) {
	if r.ckpt == nil {
		return 0, nil
	}
	r.ckpt.mu.Lock()
	defer r.ckpt.mu.Unlock()
	return r.ckpt.writes, r.ckpt.lastErr
}

// Checkpoint writes the state file now (after Recover). Front ends need
// not call it — every change is checkpointed — but it lets a caller make
// sure the file is current, for example before reporting a shutdown done.
func (r *Registry) Checkpoint() error {
	if r.ckpt == nil {
		return fmt.Errorf("%w: no Config.StateFile", ErrInvalidOptions)
	}
	r.ckpt.write()
	_, err := r.CheckpointStats()
	return err
}

// writeFileAtomic replaces path with data so that a crash at any moment
// leaves either the old or the new content: write a temporary file in the
// same directory, fsync it, rename it over path, fsync the directory (which
// makes the rename itself durable).
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("registry: checkpoint: %w", err)
	}
	tmpName := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmpName)
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("registry: checkpoint: write %s: %w", tmpName, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("registry: checkpoint: fsync %s: %w", tmpName, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("registry: checkpoint: close %s: %w", tmpName, err)
	}
	if err := os.Rename(tmpName, path); err != nil {
		return fmt.Errorf("registry: checkpoint: rename to %s: %w", path, err)
	}
	ok = true
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("registry: checkpoint: open dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("registry: checkpoint: fsync dir %s: %w", dir, err)
	}
	return nil
}
