package registry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/env"
)

// Sessions: a front end's lease on what it starts.
//
// A front end that starts processes for someone who may vanish (an MCP
// session, an ACP proxy) opens a session and starts those processes with
// StartOptions.Session naming it. The session ends in one of three ways,
// and each kills the trees of its processes still running (TERM, the
// default grace, KILL, verified, as Kill does); processes started without
// the session (MCP's persist) are never touched:
//
//   - End: the front end is done (its client disconnected cleanly). End
//     returns once the kills are done.
//   - Drop: the front end's lease dropped without an End. In the daemon,
//     the lease is a long-lived request (POST /v1/sessions): a front end
//     killed with SIGKILL closes its socket, and the daemon drops the
//     session at once. The kills run in the background, and each killed
//     process's Reason says why. A session opened by several holders (the
//     same ID opened again) is dropped when the last one drops.
//   - Reclaim: a restarted registry (Recover) finds processes that name a
//     session nobody holds any more: the daemon stopped, and the front
//     end's lease with it. It waits Config.SessionReclaim for the front
//     end to open the session again (a live front end does so as soon as
//     the daemon is back), and then kills them as a drop would.
//
// A start that names a session that is not open (ended, dropped, never
// opened) is refused, under the lock the end takes to collect the
// session's members: a process either joins before the end and is
// killed by it, or is not started.

// DefaultSessionReclaim is Config.SessionReclaim's default.
const DefaultSessionReclaim = 10 * time.Second

// SessionOptions configures OpenSession.
type SessionOptions struct {
	// ID names the session. Empty: a new session with a fresh ID. A front
	// end whose lease was lost with the daemon opens its ID again to hold
	// its processes once more; opening an ID that is open adds a holder.
	ID string `json:"id,omitempty"`
}

// SessionLease is a held session, as Service.OpenSession returns it.
type SessionLease interface {
	// ID is the session's ID, what StartOptions.Session takes.
	ID() string
	// End ends the session: later starts in it are refused, and the
	// trees of its processes still running are killed; End returns the
	// kills' results once they are done. The session ends for every
	// holder. Only the first End or Drop of a lease acts.
	End(ctx context.Context) ([]KillResult, error)
	// Drop lets go of the lease without ending the session, as a front
	// end that vanished does: when no holder is left, the session's
	// processes are killed in the background.
	Drop()
}

// session is one open session, or one a restart waits for; Registry.mu
// guards it.
type session struct {
	holders int
	// reclaim fires at reclaimBy when the front end of a session found at
	// recovery did not open it again in time; nil once someone holds it.
	reclaim   *time.Timer
	reclaimBy time.Time
}

// SessionInfo describes a session the registry knows of.
type SessionInfo struct {
	ID string `json:"id"`
	// Holders counts the leases held on it (front ends, or one front end
	// that opened it twice).
	Holders int `json:"holders"`
	// ReclaimBy is set while a restarted registry waits for the session's
	// front end to open it again: its processes are killed then.
	ReclaimBy time.Time `json:"reclaim_by,omitzero"`
}

// Sessions lists the open sessions and those a restart waits for, by ID.
func (r *Registry) Sessions() []SessionInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]SessionInfo, 0, len(r.sessions))
	for id, s := range r.sessions {
		out = append(out, SessionInfo{ID: id, Holders: s.holders, ReclaimBy: s.reclaimBy})
	}
	slices.SortFunc(out, func(a, b SessionInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// sessionIDForm is what a session ID looks like, for error messages.
const sessionIDForm = "a session ID is 1 to 64 letters, digits, '.', '_' or '-'"

// ValidSessionID reports whether id is a session ID: 1 to 64 of
// [A-Za-z0-9_.-] (env.ValidTag's alphabet), so that it can travel in a
// label, a URL path and a log line unquoted.
func ValidSessionID(id string) bool { return id != "" && env.ValidTag(id) }

// Reasons of the processes a session's lease took with it.
const (
	sessionDroppedReason   = "killed: the lease of its session %s dropped (the front end that started it went away without ending the session)"
	sessionUnclaimedReason = "killed at recovery: no front end opened its session %s again within %s of the restart"
)

// OpenSession opens the session opts names (or a new one) and holds it
// until End or Drop. ErrInvalidOptions for a malformed ID; ErrClosed once
// the registry is closed.
func (r *Registry) OpenSession(_ context.Context, opts SessionOptions) (SessionLease, error) {
	if opts.ID != "" && !ValidSessionID(opts.ID) {
		return nil, fmt.Errorf("%w: session %q: %s", ErrInvalidOptions, clip(opts.ID, 64), sessionIDForm)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, fmt.Errorf("registry: open session: %w", ErrClosed)
	}
	id := opts.ID
	for id == "" {
		if id = newSessionID(); r.sessions[id] != nil {
			id = ""
		}
	}
	s := r.sessions[id]
	if s == nil {
		s = &session{}
		r.sessions[id] = s
	}
	if s.reclaim != nil {
		s.reclaim.Stop()
		s.reclaim, s.reclaimBy = nil, time.Time{}
		r.log.Info("session opened again after the restart", "session", id)
	}
	s.holders++
	return &Session{r: r, id: id, s: s}, nil
}

func newSessionID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Session is one holder's lease on a session of a Registry (the
// SessionLease that Registry.OpenSession returns).
type Session struct {
	r    *Registry
	id   string
	s    *session // what it holds: an ID opened again after an end is another
	once sync.Once
}

var _ SessionLease = (*Session)(nil)

// ID returns the session's ID.
func (s *Session) ID() string { return s.id }

// End ends the session and kills its processes; see SessionLease.
func (s *Session) End(ctx context.Context) ([]KillResult, error) {
	var members []*proc
	acted := false
	s.once.Do(func() {
		acted = true
		r := s.r
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.sessions[s.id] != s.s {
			return // ended already, by another holder
		}
		delete(r.sessions, s.id)
		members = r.sessionMembersLocked(s.id)
	})
	if !acted {
		return nil, nil
	}
	return s.r.killSession(ctx, members, "")
}

// Drop lets go of this holder's lease; see SessionLease.
func (s *Session) Drop() {
	s.once.Do(func() {
		r := s.r
		r.mu.Lock()
		ss := r.sessions[s.id]
		if ss != s.s {
			r.mu.Unlock()
			return // ended already, by another holder
		}
		if ss.holders--; ss.holders > 0 {
			r.mu.Unlock()
			return
		}
		delete(r.sessions, s.id)
		members := r.sessionMembersLocked(s.id)
		r.mu.Unlock()
		r.killSessionLater(s.id, members, fmt.Sprintf(sessionDroppedReason, s.id), "session lease dropped: killing its processes")
	})
}

// sessionOpenLocked refuses a start in a session that is not open; ""
// (no session) is always fine. The caller holds r.mu.
func (r *Registry) sessionOpenLocked(id string) error {
	if id == "" || r.sessions[id] != nil {
		return nil
	}
	return fmt.Errorf("%w: session %s is not open: it ended, or the lease of its front end dropped; open a session and start in it while you hold it", ErrInvalidOptions, id)
}

// sessionMembersLocked returns the processes of session id whose tree may
// still run. The caller holds r.mu.
func (r *Registry) sessionMembersLocked(id string) []*proc {
	var out []*proc
	for _, p := range r.procs {
		if p.opts.Session == id && p.mayRun() {
			out = append(out, p)
		}
	}
	return out
}

// awaitSessions arms, after Recover, the reclaim of every session that a
// process whose tree may run names and nobody holds.
func (r *Registry) awaitSessions() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.procs {
		id := p.opts.Session
		if id == "" || !p.mayRun() || r.sessions[id] != nil {
			continue
		}
		wait := r.cfg.SessionReclaim
		r.sessions[id] = &session{reclaim: time.AfterFunc(wait, func() { r.reclaimExpired(id, wait) }), reclaimBy: time.Now().Add(wait)}
		r.log.Info("recover: waiting for the front end of a session to open it again", "session", id, "within", wait)
	}
}

// reclaimExpired kills the processes of session id when nobody opened it
// again within wait of the restart.
func (r *Registry) reclaimExpired(id string, wait time.Duration) {
	r.mu.Lock()
	ss := r.sessions[id]
	if ss == nil || ss.reclaim == nil || r.closed {
		r.mu.Unlock()
		return
	}
	delete(r.sessions, id)
	members := r.sessionMembersLocked(id)
	r.mu.Unlock()
	r.killSessionLater(id, members, fmt.Sprintf(sessionUnclaimedReason, id, wait), "recover: no front end opened its session again: killing its processes")
}

// killSessionLater kills members in the background, as Close waits for,
// recording reason on each process still running.
func (r *Registry) killSessionLater(id string, members []*proc, reason, msg string) {
	if len(members) == 0 {
		return
	}
	r.log.Info(msg, "session", id, "processes", len(members))
	r.goTracked(func() {
		_, grace, _ := r.killParams("", 0)
		ctx, cancel := context.WithTimeout(r.ctx, grace+killAfterCancel)
		defer cancel()
		if _, err := r.killSession(ctx, members, reason); err != nil && r.ctx.Err() == nil {
			r.log.Warn("session: kill of its processes failed", "session", id, "err", err)
		}
	})
}

// killSession kills the trees of members concurrently, with the default
// signal and grace. A non-empty reason becomes the Reason of each process
// whose leader still runs.
func (r *Registry) killSession(ctx context.Context, members []*proc, reason string) ([]KillResult, error) {
	_, grace, _ := r.killParams("", 0)
	results := make([]KillResult, len(members))
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, p := range members {
		if reason != "" {
			p.annotate(reason, true)
		}
		wg.Go(func() {
			results[i], errs[i] = p.kill(ctx, killPlan{sig: env.SIGTERM, grace: grace, escalate: true, reason: StateKilled})
			results[i].ID = p.id
		})
	}
	wg.Wait()
	return results, errors.Join(errs...)
}
