package registry

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/registry/ansi"
)

// EventType names an event.
type EventType string

// Event types.
const (
	// EventStarted: a process started running.
	EventStarted EventType = "started"
	// EventExited: a process reached a final state (exited, killed,
	// timed_out, lost). Published for every exit; see Event.Consumed for
	// when it is skipped at delivery.
	EventExited EventType = "exited"
	// EventWatchMatch: an output line matched a watch pattern.
	EventWatchMatch EventType = "watch_match"
	// EventWatchDisabled: a process's watch patterns matched so often
	// that watching was switched off.
	EventWatchDisabled EventType = "watch_disabled"
	// EventSuppressed: the global rate limit held events back; this
	// summary, published when the cooldown ends, counts them.
	EventSuppressed EventType = "suppressed"
	// EventReady: every readiness condition of a process holds
	// (StartOptions.Ready).
	EventReady EventType = "ready"
	// EventCrashed: a process that had become ready ended on its own (not
	// by a kill or timeout of ours); Status and Tail say how.
	EventCrashed EventType = "crashed"
	// EventTTLExpired: a process's TTL ran out and its tree is being
	// killed.
	EventTTLExpired EventType = "ttl_expired"
	// EventOOMKilled: the kernel's OOM killer ended a process
	// (env.ExitStatus.OOMKilled); published just before its exited
	// event, with Status and Tail. Its Info.Reason is ReasonOutOfMemory.
	EventOOMKilled EventType = "oom_killed"
	// EventKillFinished: a kill that its backend did not answer
	// (KillResult.Unreachable, Info.KillPending) ran once the backend
	// answered again; Kill is its outcome.
	EventKillFinished EventType = "kill_finished"
	// EventRunaway: a running process passed its runaway thresholds
	// (StartOptions.Runaway, Config.Runaway): CPU at or above a share
	// with no output for a time, or memory grown by a size within it.
	// Summary says what was seen. Once per episode: Info.Runaway stays
	// set until the condition clears, which re-arms it.
	EventRunaway EventType = "runaway"
	// EventWaitingInput: a running process waits for input
	// (Info.WaitingInput): WaitingInput says how and what it asked. Once
	// per wait: again only after it read, wrote or was written to.
	EventWaitingInput EventType = "waiting_input"
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
	// MaxEventTail bounds Event.Tail.
	MaxEventTail = 2048
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
	// event. A Notify exited event is exempt from the global rate limit.
	Notify bool `json:"notify,omitempty"`
	// Tail holds, for a Notify exited event, the last lines of the
	// process's output: ANSI-stripped, at most MaxEventTail bytes, starting
	// at a line start (or, when the last line alone is longer, at a UTF-8
	// character boundary), without the final newline.
	Tail string `json:"tail,omitempty"`
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
	// Kill is the outcome of a kill_finished event's kill.
	Kill *KillResult `json:"kill,omitempty"`
	// WaitingInput is a waiting_input event's wait.
	WaitingInput *WaitingInput `json:"waiting_input,omitempty"`

	// consumed is the process's "a caller received the final result"
	// flag, shared by every copy of an exited event so that the check
	// happens at delivery, not at publication (see Consumed). It never
	// leaves the process: an Event decoded from JSON has none.
	consumed *atomic.Bool
}

// Consumed reports whether ev is an exited event whose process's final
// result a caller already received through Wait, Poll or Run (a Wait
// blocked when the process ended counts as having received it). Such an
// event must not be delivered: whoever asked has the result. The answer
// can change from false to true at any time, so a front end checks it at
// the last moment before handing ev on — Subscription.Next does, and so
// must anything that keeps events to serve them later.
func (ev Event) Consumed() bool {
	return ev.Type == EventExited && ev.consumed != nil && ev.consumed.Load()
}

// Subscription is a pull-based view of the event stream from the moment
// Subscribe was called. It is bounded: when more than
// Config.SubscriptionBuffer events are waiting, the oldest are dropped and
// counted (Event.Dropped, Dropped) — a slow subscriber never blocks the
// registry. Safe for concurrent use.
type Subscription struct {
	bus    *eventBus
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

func newSubscription(bus *eventBus, size int) *Subscription {
	return &Subscription{bus: bus, queue: make([]Event, size), wake: make(chan struct{}, 1), done: make(chan struct{})}
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
// A completion event is not repeated: an exited event that is Consumed
// when Next would return it is skipped, because whoever asked has the
// result already.
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	for {
		s.mu.Lock()
		for s.n > 0 {
			ev := s.queue[s.head]
			s.queue[s.head] = Event{}
			s.head = (s.head + 1) % len(s.queue)
			s.n--
			if ev.Consumed() {
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
	s.bus.unsubscribe(s)
}

// eventBus is the event stream: sequence numbers, subscribers and the
// global rate limit. Its lock is taken after a process's lock is released
// and never while holding the registry lock.
type eventBus struct {
	log     *slog.Logger
	bufSize int // each subscription's queue

	mu         sync.Mutex
	seq        int64
	subs       map[*Subscription]struct{}
	recent     []time.Time // times of the events delivered in the last window
	cooling    bool
	suppressed map[EventType]int
	cooldown   *time.Timer
	closed     bool
}

func newEventBus(log *slog.Logger, bufSize int) *eventBus {
	return &eventBus{log: log, bufSize: bufSize, subs: make(map[*Subscription]struct{})}
}

// Subscribe returns a subscription to the events published from now on.
// Close it when done.
func (r *Registry) Subscribe() *Subscription { return r.ev.subscribe() }

func (b *eventBus) subscribe() *Subscription {
	s := newSubscription(b, b.bufSize)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		s.closed = true
		close(s.done)
		return s
	}
	b.subs[s] = struct{}{}
	return s
}

func (b *eventBus) unsubscribe(s *Subscription) {
	b.mu.Lock()
	delete(b.subs, s)
	b.mu.Unlock()
}

// publish applies the global rate limit and hands ev to every subscriber.
//
// A completion someone asked for (exited with Notify), a dev server's
// ready, crashed and ttl_expired events, and oom_killed (each at most one
// per process, and what an agent waits on or must hear of) bypass the limit: they are neither held back nor
// counted, even during a cooldown. The limit
// exists for floods of watch matches, which an agent can do nothing about;
// a completion notice is the one event it needs per process, and there is
// at most one per process, so those cannot flood.
func (b *eventBus) publish(ev Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	now := time.Now()
	if ev.Type == EventExited && ev.Notify || ev.Type == EventCrashed || ev.Type == EventReady || ev.Type == EventTTLExpired ||
		ev.Type == EventOOMKilled || ev.Type == EventKillFinished {
		b.deliverLocked(ev, now)
		return
	}
	if b.cooling {
		b.suppressed[ev.Type]++
		return
	}
	cut := 0
	for cut < len(b.recent) && now.Sub(b.recent[cut]) >= GlobalEventWindow {
		cut++
	}
	b.recent = append(b.recent[:0], b.recent[cut:]...)
	if len(b.recent) >= GlobalEventMax {
		b.cooling = true
		b.suppressed = map[EventType]int{ev.Type: 1}
		b.cooldown = time.AfterFunc(GlobalCooldown, b.endCooldown)
		b.log.Warn("event rate limit reached; holding events back", "max", GlobalEventMax, "window", GlobalEventWindow, "cooldown", GlobalCooldown)
		return
	}
	b.recent = append(b.recent, now)
	b.deliverLocked(ev, now)
}

func (b *eventBus) deliverLocked(ev Event, now time.Time) {
	b.seq++
	ev.Seq, ev.Time = b.seq, now
	for s := range b.subs {
		s.push(ev)
	}
}

// endCooldown publishes the summary of the events held back.
func (b *eventBus) endCooldown() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || !b.cooling {
		return
	}
	total := 0
	for _, n := range b.suppressed {
		total += n
	}
	ev := Event{Type: EventSuppressed, Suppressed: b.suppressed,
		Summary: fmt.Sprintf("%d events were held back by the rate limit (%d per %s); listing the processes shows their current states", total, GlobalEventMax, GlobalEventWindow)}
	b.cooling, b.suppressed, b.cooldown, b.recent = false, nil, nil, b.recent[:0]
	b.deliverLocked(ev, time.Now())
}

// close ends every subscription; later publishes are dropped.
func (b *eventBus) close() {
	b.mu.Lock()
	b.closed = true
	if b.cooldown != nil {
		b.cooldown.Stop()
	}
	subs := make([]*Subscription, 0, len(b.subs))
	for s := range b.subs {
		subs = append(subs, s)
	}
	b.mu.Unlock()
	for _, s := range subs {
		s.Close()
	}
}

// tailWindow is how much raw output outputTail reads: more than
// MaxEventTail, since escape sequences (colours, progress bars redrawn
// with carriage returns) can make up most of the raw bytes.
const tailWindow = 8 * MaxEventTail

// outputTail returns the last lines of what b holds for an exited event's
// Tail: ANSI-stripped, valid UTF-8, at most max bytes, without the final
// newline. The cut lands after a newline; only when the last line alone is
// longer than max does it land inside that line, on a character boundary.
func outputTail(b *buffer, max int) string {
	c := b.ReadSince(b.Total() - tailWindow)
	data := c.Data
	partial := c.Next > int64(len(data)) // the window starts inside the stream
	if c.Omitted > 0 {
		// Only what follows the gap is contiguous with the end.
		data, partial = data[c.OmittedAt:], true
	}
	text := strings.ToValidUTF8(string(ansi.Strip(data)), "\uFFFD")
	text = strings.TrimRight(text, "\n")
	if partial {
		// The first line (and any escape sequence it started in) was cut
		// by the window: drop it, unless it is all there is.
		if i := strings.IndexByte(text, '\n'); i >= 0 {
			text = text[i+1:]
		}
	}
	if len(text) <= max {
		return text
	}
	cut := len(text) - max
	if i := strings.IndexByte(text[cut:], '\n'); i >= 0 {
		return text[cut+i+1:]
	}
	for cut < len(text) && !utf8.RuneStart(text[cut]) {
		cut++
	}
	return text[cut:]
}

// exitedEvent builds the exited event of p, whose final state in holds.
// Whether it is delivered is decided later, at delivery (Event.Consumed).
//
// It must be called after p.done is closed: a Wait or Run still blocked on
// p at that point will return the final result (see leaveWait), so the
// completion counts as consumed now — before any subscriber can take the
// event — rather than whenever that caller gets round to it.
func (p *proc) exitedEvent(in Info) Event {
	if p.waiters.Load() > 0 {
		p.finalSeen.Store(true)
	}
	ev := Event{Type: EventExited, ID: p.id, Command: p.opts.Command, State: in.State, Status: in.Status,
		Notify: p.opts.Notify || p.watchDisabled.Load(), consumed: &p.finalSeen}
	if in.Status != nil {
		ev.Summary = fmt.Sprintf("%s %s (%s): %s", p.id, in.State, in.Status, clip(p.opts.Command, 200))
	} else {
		ev.Summary = fmt.Sprintf("%s %s: %s", p.id, in.State, in.Reason)
	}
	if ev.Notify {
		// The output is complete: finish runs after the stream ended.
		ev.Tail = outputTail(p.buf, MaxEventTail)
	}
	return ev
}

// enterWait counts the caller as blocked on p's end. Every enterWait is
// paired with one leaveWait, whose answer the caller must honour.
func (p *proc) enterWait() { p.waiters.Add(1) }

// leaveWait uncounts the caller and reports whether p has ended, in which
// case the caller must return the final result, and p's completion counts
// as consumed.
//
// The order makes the count exact for exitedEvent, which closes p.done
// before reading the count: a caller that sees p ended stores finalSeen
// before it uncounts itself, and a caller that did not looks again after
// uncounting. So if exitedEvent saw the caller counted, that second look
// comes after p.done closed and reports the end.
func (p *proc) leaveWait() bool {
	select {
	case <-p.done:
		p.finalSeen.Store(true)
		p.waiters.Add(-1)
		return true
	default:
	}
	p.waiters.Add(-1)
	select {
	case <-p.done:
		p.finalSeen.Store(true)
		return true
	default:
		return false
	}
}
