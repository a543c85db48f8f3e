package registry

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/corralhq/corral/env"
)

// EventType names an event.
type EventType string

// Event types.
const (
	// EventStarted: a process started running.
	EventStarted EventType = "started"
	// EventExited: a process reached a final state (exited, killed,
	// timed_out, lost). Published for every exit; see Subscription.Next
	// for when it is skipped at delivery.
	EventExited EventType = "exited"
	// EventWatchMatch: an output line matched a watch pattern.
	EventWatchMatch EventType = "watch_match"
	// EventWatchDisabled: a process's watch patterns matched so often
	// that watching was switched off.
	EventWatchDisabled EventType = "watch_disabled"
	// EventSuppressed: the global rate limit held events back; this
	// summary, published when the cooldown ends, counts them.
	EventSuppressed EventType = "suppressed"
)

// Rate limits of the event stream (see the package documentation).
const (
	WatchWindow            = 10 * time.Second
	WatchLimitedWindowsMax = 3
	GlobalEventWindow      = 10 * time.Second
	GlobalEventMax         = 15
	GlobalCooldown         = 30 * time.Second
	// maxEventLine bounds Event.Line.
	maxEventLine = 1024
)

// Event is one notification of the registry's event stream. It is plain
// data.
type Event struct {
	// Seq increases by one for every published event.
	Seq  int64     `json:"seq"`
	Time time.Time `json:"time"`
	Type EventType `json:"type"`
	// ID names the process ("" for suppressed summaries).
	ID      string `json:"id,omitempty"`
	Command string `json:"command,omitempty"`
	State   State  `json:"state,omitempty"`
	// Status is the exit status of an exited event, when known.
	Status *env.ExitStatus `json:"status,omitempty"`
	// Notify: the process asked to be told about its exit (StartOptions.
	// Notify), or its watching was disabled, which promises one completion
	// event.
	Notify bool `json:"notify,omitempty"`
	// Pattern and Line describe a watch match: the pattern as given and
	// the ANSI-stripped line (at most 1 KiB).
	Pattern string `json:"pattern,omitempty"`
	Line    string `json:"line,omitempty"`
	// Summary is a human-readable description of the event.
	Summary string `json:"summary,omitempty"`
	// Suppressed counts, for an EventSuppressed summary, the events held
	// back by type.
	Suppressed map[EventType]int `json:"suppressed,omitempty"`
	// Dropped counts events this subscriber lost just before this one
	// because it read too slowly.
	Dropped int64 `json:"dropped,omitempty"`
}

// Subscription is a pull-based view of the event stream from the moment
// Subscribe was called. It is bounded: when more than
// Config.SubscriptionBuffer events are waiting, the oldest are dropped and
// counted (Event.Dropped, Dropped) — a slow subscriber never blocks the
// registry. Safe for concurrent use.
type Subscription struct {
	r      *Registry
	mu     sync.Mutex
	queue  []Event // ring
	head   int
	n      int
	lost   int64 // dropped since the last delivered event
	total  int64 // dropped overall
	wake   chan struct{}
	done   chan struct{} // closed by Close
	closed bool
}

func newSubscription(r *Registry, size int) *Subscription {
	return &Subscription{r: r, queue: make([]Event, size), wake: make(chan struct{}, 1), done: make(chan struct{})}
}

func (s *Subscription) push(ev Event) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	if s.n == len(s.queue) {
		s.head = (s.head + 1) % len(s.queue)
		s.n--
		s.lost++
		s.total++
	}
	s.queue[(s.head+s.n)%len(s.queue)] = ev
	s.n++
	s.mu.Unlock()
	s.signal()
}

func (s *Subscription) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Next returns the next event, blocking until one arrives, ctx is done
// (ctx.Err()), or the subscription or registry is closed (ErrClosed).
//
// A completion event is not repeated: an EventExited whose process's final
// result a caller already received through Wait, Poll or Run is skipped
// here, because whoever asked has it already.
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	for {
		s.mu.Lock()
		for s.n > 0 {
			ev := s.queue[s.head]
			s.queue[s.head] = Event{}
			s.head = (s.head + 1) % len(s.queue)
			s.n--
			if ev.Type == EventExited && s.r.finalSeen(ev.ID) {
				continue
			}
			ev.Dropped, s.lost = s.lost, 0
			more := s.n > 0
			s.mu.Unlock()
			if more {
				// Pass the wake-up on: a second concurrent Next may be
				// waiting for the events this call left behind.
				s.signal()
			}
			return ev, nil
		}
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return Event{}, fmt.Errorf("registry: next event: %w", ErrClosed)
		}
		select {
		case <-s.wake:
		case <-s.done:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Dropped returns how many events this subscription lost overall.
func (s *Subscription) Dropped() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// Close ends the subscription; a blocked Next returns ErrClosed. Closing
// twice is harmless.
func (s *Subscription) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.n = 0
	close(s.done)
	s.mu.Unlock()
	s.r.unsubscribe(s)
}

// eventState is the event stream: sequence numbers, subscribers and the
// global rate limit. Its lock is taken after a process's lock is released
// and never while holding the registry lock.
type eventState struct {
	mu         sync.Mutex
	seq        int64
	subs       map[*Subscription]struct{}
	recent     []time.Time // times of the events delivered in the last window
	cooling    bool
	suppressed map[EventType]int
	stopTimer  func() bool
	closed     bool
}

// Subscribe returns a subscription to the events published from now on.
// Close it when done.
func (r *Registry) Subscribe() *Subscription {
	s := newSubscription(r, r.cfg.SubscriptionBuffer)
	r.ev.mu.Lock()
	defer r.ev.mu.Unlock()
	if r.ev.closed {
		s.closed = true
		close(s.done)
		return s
	}
	r.ev.subs[s] = struct{}{}
	return s
}

func (r *Registry) unsubscribe(s *Subscription) {
	r.ev.mu.Lock()
	delete(r.ev.subs, s)
	r.ev.mu.Unlock()
}

// publish applies the global rate limit and hands ev to every subscriber.
func (r *Registry) publish(ev Event) {
	e := &r.ev
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	now := r.clock.Now()
	if e.cooling {
		e.suppressed[ev.Type]++
		return
	}
	cut := 0
	for cut < len(e.recent) && now.Sub(e.recent[cut]) >= GlobalEventWindow {
		cut++
	}
	e.recent = append(e.recent[:0], e.recent[cut:]...)
	if len(e.recent) >= GlobalEventMax {
		e.cooling = true
		e.suppressed = map[EventType]int{ev.Type: 1}
		e.stopTimer = r.clock.AfterFunc(GlobalCooldown, r.endCooldown)
		r.log.Warn("event rate limit reached; holding events back", "max", GlobalEventMax, "window", GlobalEventWindow, "cooldown", GlobalCooldown)
		return
	}
	e.recent = append(e.recent, now)
	r.deliverLocked(ev, now)
}

func (r *Registry) deliverLocked(ev Event, now time.Time) {
	e := &r.ev
	e.seq++
	ev.Seq, ev.Time = e.seq, now
	for s := range e.subs {
		s.push(ev)
	}
}

// endCooldown publishes the summary of the events held back.
func (r *Registry) endCooldown() {
	e := &r.ev
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || !e.cooling {
		return
	}
	total := 0
	for _, n := range e.suppressed {
		total += n
	}
	ev := Event{Type: EventSuppressed, Suppressed: e.suppressed,
		Summary: fmt.Sprintf("%d events were held back by the rate limit (%d per %s); `corral ps --all` shows current states", total, GlobalEventMax, GlobalEventWindow)}
	e.cooling, e.suppressed, e.stopTimer, e.recent = false, nil, nil, e.recent[:0]
	r.deliverLocked(ev, r.clock.Now())
}

func (r *Registry) closeEvents() {
	e := &r.ev
	e.mu.Lock()
	e.closed = true
	if e.stopTimer != nil {
		e.stopTimer()
	}
	subs := make([]*Subscription, 0, len(e.subs))
	for s := range e.subs {
		subs = append(subs, s)
	}
	e.mu.Unlock()
	for _, s := range subs {
		s.Close()
	}
}
