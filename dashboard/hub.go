package dashboard

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/corralhq/corral/registry"
)

// Session is a process as the page shows it: the registry's Info and the
// state in ps's words.
type Session struct {
	registry.Info
	StateText string `json:"state_text"`
}

func sessionOf(in registry.Info) Session {
	return Session{Info: in, StateText: in.StateText()}
}

// Server-to-browser messages about the list.
type (
	sessionsMsg struct {
		Type     string    `json:"type"` // "sessions"
		Sessions []Session `json:"sessions"`
	}
	sessionUpdatedMsg struct {
		Type    string  `json:"type"` // "session_updated"
		Session Session `json:"session"`
	}
	sessionRemovedMsg struct {
		Type      string `json:"type"` // "session_removed"
		SessionID string `json:"sessionId"`
	}
)

// coalesce is how long the hub lets a burst of changes (a kill ends a
// tree in steps) settle before it looks: well under the 100 ms within which
// every browser must see a change.
const coalesce = 10 * time.Millisecond

// hub keeps the list every browser sees and sends each change to all of
// them. It waits on Registry.Changed, so it costs nothing while nothing
// changes.
type hub struct {
	reg *registry.Registry
	log *slog.Logger

	// refreshing serialises refresh (List, then apply): an older list
	// applied after a newer one would show a state that is gone.
	refreshing sync.Mutex
	// joined wakes a hub that stopped looking for lack of browsers.
	joined chan struct{}

	mu       sync.Mutex // held while a change is sent, so all see one order
	clients  map[*conn]struct{}
	sessions map[string]Session
	compared map[string]string // the JSON of each session, to find changes
}

func newHub(reg *registry.Registry, log *slog.Logger) *hub {
	return &hub{reg: reg, log: log, joined: make(chan struct{}, 1),
		clients: map[*conn]struct{}{}, sessions: map[string]Session{}, compared: map[string]string{}}
}

func (h *hub) run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		// Without a browser, diffing the list would encode every
		// process at every change for nobody; join refreshes instead.
		if !h.watched() {
			select {
			case <-ctx.Done():
				return
			case <-h.joined:
			}
		}
		changed := h.reg.Changed()
		h.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		t.Reset(coalesce)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refresh lists the processes and sends what changed since the last look.
func (h *hub) refresh(ctx context.Context) {
	h.refreshing.Lock()
	defer h.refreshing.Unlock()
	list, err := h.reg.List(ctx, registry.ListOptions{All: true})
	if err != nil {
		h.log.Warn("list processes", "err", err)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var msgs []any
	seen := make(map[string]bool, len(list))
	for _, in := range list {
		seen[in.ID] = true
		s := sessionOf(in)
		// Output counts alone are no change worth a message (and
		// Changed does not fire for them).
		cmp := s
		cmp.OutputBytes = 0
		key, _ := json.Marshal(cmp)
		if h.compared[in.ID] == string(key) {
			continue
		}
		h.compared[in.ID] = string(key)
		h.sessions[in.ID] = s
		msgs = append(msgs, sessionUpdatedMsg{Type: "session_updated", Session: s})
	}
	for id := range h.sessions {
		if !seen[id] {
			delete(h.sessions, id)
			delete(h.compared, id)
			msgs = append(msgs, sessionRemovedMsg{Type: "session_removed", SessionID: id})
		}
	}
	for _, m := range msgs {
		for c := range h.clients {
			c.send(m)
		}
	}
}

func (h *hub) watched() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.clients) > 0
}

// join adds c and sends it the whole list first, under the lock: no
// change can slip between the list and the first update. The list is
// refreshed first: the hub does not follow changes while nobody watches.
func (h *hub) join(ctx context.Context, c *conn) {
	h.refresh(ctx)
	defer func() {
		select {
		case h.joined <- struct{}{}:
		default:
		}
	}()
	h.mu.Lock()
	defer h.mu.Unlock()
	all := make([]Session, 0, len(h.sessions))
	for _, s := range h.sessions {
		all = append(all, s)
	}
	slices.SortFunc(all, func(a, b Session) int { return a.CreatedAt.Compare(b.CreatedAt) })
	c.send(sessionsMsg{Type: "sessions", Sessions: all})
	h.clients[c] = struct{}{}
}

func (h *hub) leave(c *conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.clients, c)
}
