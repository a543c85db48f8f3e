package dashboard

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/corralhq/corral/registry"
)

// Session is a process as the page shows it: the registry's Info, the
// state in ps's words, and its row: the texts of every column of the list
// (registry.ListColumns), computed by the registry as corral ps shows
// them, with the ports of the hub's last look. The page only lays them
// out.
type Session struct {
	registry.Info
	StateText string `json:"state_text"`
	// LimitsText is Info.Limits as the flags say them ("memory 2G, cpus
	// 1.5, pids 512"), for the detail view; absent when it has none.
	LimitsText string       `json:"limits_text,omitempty"`
	Row        registry.Row `json:"row"`
}

// Server-to-browser messages about the list.
type (
	sessionsMsg struct {
		Type string `json:"type"` // "sessions"
		// Columns name the texts of each session's row, in order.
		Columns  []registry.Column `json:"columns"`
		Sessions []Session         `json:"sessions"`
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

// tick is how often the hub looks again while browsers watch, with no
// change: the AGE and LEFT texts count with the clock.
const tick = time.Second

// portsEvery is how often, in ticks, the hub looks up the ports the trees
// listen on (a listening socket is no state change: nothing signals it).
const portsEvery = 2

// portsWait bounds one look-up of ports. The registry itself waits at
// most 600 ms for its backends and never asks one that does not answer;
// this bounds a Service that is itself remote.
const portsWait = 5 * time.Second

// hub keeps the list every browser sees and sends each change to all of
// them. It waits on Live.Changed, so a change reaches the browsers at
// once; while browsers watch it also looks every tick, for the texts that
// count with the clock, and every portsEvery ticks for ports, without
// ever holding a change back for them.
type hub struct {
	svc  registry.Service
	live Live
	log  *slog.Logger

	// refreshing serialises refresh (List, then apply): an older list
	// applied after a newer one would show a state that is gone.
	refreshing sync.Mutex
	// joined wakes a hub that stopped looking for lack of browsers.
	joined chan struct{}
	// portsCame wakes the hub when a look at ports found a change.
	portsCame chan struct{}

	portsMu sync.Mutex
	ports   map[string]portsSeen // by process ID, from the last look

	mu       sync.Mutex // held while a change is sent, so all see one order
	clients  map[*conn]struct{}
	sessions map[string]Session
	compared map[string]string // the JSON of each session, to find changes
}

// portsSeen is what a look found of one process's ports.
type portsSeen struct {
	ports   []int
	unknown bool
}

func newHub(svc registry.Service, live Live, log *slog.Logger) *hub {
	return &hub{svc: svc, live: live, log: log, joined: make(chan struct{}, 1), portsCame: make(chan struct{}, 1),
		clients: map[*conn]struct{}{}, sessions: map[string]Session{}, compared: map[string]string{}}
}

// session is in as the page shows it as of now, with the ports of the
// last look when in's tree runs.
func (h *hub) session(in registry.Info, now time.Time) Session {
	if in.TreeRunning && len(in.Ports) == 0 && !in.PortsUnknown {
		h.portsMu.Lock()
		seen, ok := h.ports[in.ID]
		h.portsMu.Unlock()
		if ok {
			in.Ports, in.PortsUnknown = seen.ports, seen.unknown
		}
	}
	se := Session{Info: in, StateText: in.StateText(), Row: in.Row(now)}
	if in.Limits != nil {
		se.LimitsText = in.Limits.String()
	}
	return se
}

func (h *hub) run(ctx context.Context) {
	var looking sync.WaitGroup // the look at ports in flight, if any
	defer looking.Wait()
	idle := make(chan struct{}, 1) // holds a token while no look is in flight
	idle <- struct{}{}
	lookPorts := func() {
		select {
		case <-idle:
			looking.Go(func() {
				defer func() { idle <- struct{}{} }()
				h.lookPorts(ctx)
			})
		default: // the last look still runs: its answer comes
		}
	}
	t := time.NewTimer(0)
	defer t.Stop()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	ticks := 0
	for {
		// Without a browser, diffing the list would encode every
		// process at every change for nobody; join refreshes instead.
		if !h.watched() {
			select {
			case <-ctx.Done():
				return
			case <-h.joined:
				lookPorts() // the page gets them within one look
			}
		}
		changed := h.live.Changed()
		h.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-h.portsCame:
			continue
		case <-ticker.C:
			if ticks++; ticks%portsEvery == 0 {
				lookPorts()
			}
			continue
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

// lookPorts asks the Service for the ports of every running tree (as
// corral ps does) and wakes the hub when they differ from the last look.
func (h *hub) lookPorts(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, portsWait)
	defer cancel()
	list, err := h.svc.List(ctx, registry.ListOptions{All: true, Ports: true})
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn("look up ports", "err", err)
		}
		return
	}
	seen := make(map[string]portsSeen, len(list))
	for _, in := range list {
		if in.TreeRunning {
			seen[in.ID] = portsSeen{ports: in.Ports, unknown: in.PortsUnknown}
		}
	}
	h.portsMu.Lock()
	same := maps.EqualFunc(seen, h.ports, func(a, b portsSeen) bool {
		return a.unknown == b.unknown && slices.Equal(a.ports, b.ports)
	})
	h.ports = seen
	h.portsMu.Unlock()
	if !same {
		select {
		case h.portsCame <- struct{}{}:
		default:
		}
	}
}

// refresh lists the processes and sends what changed since the last look.
func (h *hub) refresh(ctx context.Context) {
	h.refreshing.Lock()
	defer h.refreshing.Unlock()
	list, err := h.svc.List(ctx, registry.ListOptions{All: true})
	if err != nil {
		h.log.Warn("list processes", "err", err)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var msgs []any
	seen := make(map[string]bool, len(list))
	now := time.Now()
	for _, in := range list {
		seen[in.ID] = true
		s := h.session(in, now)
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
	c.send(sessionsMsg{Type: "sessions", Columns: registry.ListColumns(), Sessions: all})
	h.clients[c] = struct{}{}
}

func (h *hub) leave(c *conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.clients, c)
}
