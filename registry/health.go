package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/corralhq/corral/env"
)

// Backend health: the condition of every opened environment (env.Condition:
// ok, paused, unreachable, gone), kept by the registry so that a listing
// shows it without asking the backend, and a kill on a backend known not
// to answer is left pending at once instead of waiting for it.
//
// Two sources feed it:
//
//   - A prober per environment that implements env.HealthChecker (docker
//     asks the engine about the container, ssh sends a keepalive, a plugin
//     asks its plugin, a nohup transport without its own check makes one
//     trivial call). It runs in the background, one check at a time, each
//     bounded by env.HealthTimeout: every healthEvery while the backend is
//     ok, every healthEveryBad while it is not, and at once when kicked. A
//     check that runs out of time is asked again at once, and only
//     healthStrikes of them in a row call an ok backend unreachable: a busy
//     machine (a Docker Engine at a load of 50) answers late now and then.
//   - What the registry's own calls see (observe): a call made for a
//     listing, a port look-up or a kill that overran its deadline, or
//     failed with env.ErrUnavailable, marks the backend unreachable at
//     once and kicks the prober, which confirms or clears it; a call that
//     succeeds clears a mark that only an observation set. Such a mark is
//     shown but never makes a kill pending on its own: a busy machine can
//     overrun a deadline.
//
// An environment without a HealthChecker (local) is ok: its prober only
// clears what an observation marked, and resumes pending kills.
//
// When a backend comes back to ok, the kills left pending on it run again
// (kill.go); a condition change also wakes Changed, so the dashboard
// shows it.

// Health check pacing.
const (
	healthEvery    = 5 * time.Second
	healthEveryBad = time.Second
)

// backendHealth is one environment's condition.
type backendHealth struct {
	mu       sync.Mutex
	h        env.Health
	since    time.Time
	checked  time.Time // the last probe's end; zero before the first
	observed bool      // h was set by an observation, not a probe
	kick     chan struct{}
	// probed wakes whoever waits for the next probe's finding
	// (freshCondition).
	probed changeSignal
	// sick is closed when a probe finds the backend paused or
	// unreachable, and replaced when one finds it ok again: a call under
	// way gives up then (callCtx).
	sick chan struct{}
}

func newBackendHealth() *backendHealth {
	return &backendHealth{h: env.Health{Condition: env.ConditionOK}, since: time.Now(), kick: make(chan struct{}, 1), sick: make(chan struct{})}
}

// sickSignal returns the channel closed when a probe finds the backend not
// answering; closed already when one has.
func (b *backendHealth) sickSignal() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sick
}

// lastChecked is when the last probe ended.
func (b *backendHealth) lastChecked() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.checked
}

func (b *backendHealth) get() (h env.Health, since time.Time, observed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.h, b.since, b.observed
}

// set records h and reports the condition before, and whether it changed.
func (b *backendHealth) set(h env.Health, observed bool) (env.Condition, bool) {
	if h.Condition == "" {
		h.Condition = env.ConditionOK
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	old := b.h.Condition
	if !observed {
		b.checked = time.Now()
		notAnswering := h.Condition == env.ConditionPaused || h.Condition == env.ConditionUnreachable
		select {
		case <-b.sick:
			if !notAnswering {
				b.sick = make(chan struct{})
			}
		default:
			if notAnswering {
				close(b.sick)
			}
		}
	}
	if old != h.Condition {
		b.since = time.Now()
	}
	b.h, b.observed = h, observed
	if !observed {
		b.probed.notify()
	}
	return old, old != h.Condition
}

func (b *backendHealth) poke() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// slotOf returns the opened environment's slot of target, nil when it is
// not open (or still opening, or failed).
func (r *Registry) slotOf(target string) *envSlot {
	r.mu.Lock()
	slot := r.envs[target]
	r.mu.Unlock()
	if slot == nil {
		return nil
	}
	select {
	case <-slot.ready:
	default:
		return nil
	}
	if slot.err != nil || slot.env == nil {
		return nil
	}
	return slot
}

// condition returns target's health as last seen (ok for a backend not
// opened yet) and whether a probe, rather than an observation, found it.
func (r *Registry) condition(target string) (env.Health, bool) {
	slot := r.slotOf(target)
	if slot == nil {
		return env.Health{Condition: env.ConditionOK}, true
	}
	h, _, observed := slot.health.get()
	return h, !observed
}

// watchHealth starts the prober of a newly opened environment. Called
// once per slot, after its Open succeeded. An environment that cannot be
// checked is taken to be ok at each round, which clears what an
// observation marked and resumes the kills left pending on it.
func (r *Registry) watchHealth(target string, slot *envSlot) {
	hc, _ := slot.env.(env.HealthChecker)
	r.goTracked(func() { r.probeLoop(target, slot, hc) })
	r.watchStats(target, slot)
	r.watchInput(target, slot)
}

func (r *Registry) probeLoop(target string, slot *envSlot, hc env.HealthChecker) {
	t := time.NewTimer(0)
	defer t.Stop()
	strikes := 0 // checks in a row that ran out of time
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		case <-slot.health.kick:
			t.Stop()
		}
		r.mu.Lock()
		current := r.envs[target] == slot
		r.mu.Unlock()
		if !current {
			return // the environment was replaced (reopened) or dropped
		}
		ctx, cancel := context.WithTimeout(r.ctx, env.HealthTimeout)
		h, late := checkHealth(ctx, hc)
		cancel()
		if r.ctx.Err() != nil {
			return
		}
		if late {
			strikes++
		} else {
			strikes = 0
		}
		if cur, _, _ := slot.health.get(); late && strikes < healthStrikes && cur.Condition == env.ConditionOK {
			// One slow answer on a busy machine is not a sick backend:
			// ask again at once before saying so.
			t.Reset(0)
			continue
		}
		r.setHealth(target, slot, h, false)
		every := healthEvery
		if h.Condition != env.ConditionOK {
			every = healthEveryBad
		}
		t.Reset(every)
	}
}

// freshCondition is condition for a decision that refuses work: a probe's
// finding that the backend does not answer, older than healthFresh, is
// checked again first (one check, bounded by env.HealthTimeout and ctx),
// so that a backend that has just come back (a container unpaused a
// moment ago) is not refused on a finding the prober would only renew
// within healthEveryBad.
func (r *Registry) freshCondition(ctx context.Context, target string) (env.Health, bool) {
	slot := r.slotOf(target)
	if slot == nil {
		return env.Health{Condition: env.ConditionOK}, true
	}
	h, _, observed := slot.health.get()
	if observed || h.Condition == env.ConditionOK || time.Since(slot.health.lastChecked()) <= healthFresh {
		return h, !observed
	}
	next := slot.health.probed.next()
	slot.health.poke()
	t := time.NewTimer(env.HealthTimeout + healthFresh)
	defer t.Stop()
	select {
	case <-next:
	case <-t.C:
	case <-ctx.Done():
	case <-r.stop:
	}
	h, _, observed = slot.health.get()
	return h, !observed
}

// healthFresh is the age beyond which a check is asked for at once by a
// call that may find the backend sick (callCtx): a check is cheap (one
// inspect, one keepalive), a call that waits out its deadline is not.
const healthFresh = 250 * time.Millisecond

// healthStrikes is how many checks in a row must run out of time before a
// backend that was ok is called unreachable for it. A definite answer
// (paused, connection down, gone) counts at once.
const healthStrikes = 2

// checkHealth runs one check, returning within ctx whatever the checker
// does: one that overruns its deadline counts as unreachable, and late
// says the check ran out of time. Without a checker the backend is ok.
func checkHealth(ctx context.Context, hc env.HealthChecker) (h env.Health, late bool) {
	if hc == nil {
		return env.Health{Condition: env.ConditionOK}, false
	}
	res := make(chan env.Health, 1)
	go func() { res <- hc.Health(ctx) }()
	select {
	case h := <-res:
		return h, ctx.Err() != nil && h.Condition != env.ConditionOK
	case <-ctx.Done():
		return env.Health{Condition: env.ConditionUnreachable, Detail: fmt.Sprintf("it did not answer a health check within %s", env.HealthTimeout)}, true
	}
}

// setHealth records a probe's or an observation's finding. A change is
// logged and wakes Changed; a backend found ok runs its pending kills.
func (r *Registry) setHealth(target string, slot *envSlot, h env.Health, observed bool) {
	old, changed := slot.health.set(h, observed)
	if changed {
		if h.Condition == env.ConditionOK {
			r.log.Info("backend answers again", "backend", target, "was", old)
		} else {
			r.log.Warn("backend does not answer", "backend", target, "condition", h.Condition, "detail", h.Detail)
		}
		r.changes.notify()
	}
	if h.Condition == env.ConditionOK && !observed {
		r.resumePending(target)
	}
}

// observe records what a call the registry made on target for a listing,
// a port look-up or a kill showed: err nil is an answer, an error that
// says the backend did not answer (see unanswered) marks it unreachable
// until the prober, kicked here, says otherwise.
func (r *Registry) observe(target string, err error, what string) {
	slot := r.slotOf(target)
	if slot == nil {
		return
	}
	h, _, observed := slot.health.get()
	switch {
	case err == nil:
		if observed && h.Condition != env.ConditionOK {
			r.setHealth(target, slot, env.Health{Condition: env.ConditionOK}, true)
		}
	case unanswered(err):
		if h.Condition == env.ConditionOK {
			r.setHealth(target, slot, env.Health{Condition: env.ConditionUnreachable,
				Detail: clip(fmt.Sprintf("%s did not answer: %v", what, err), 200)}, true)
		}
		slot.health.poke()
	}
}

// unanswered reports whether err says that the backend did not answer (a
// call cut by its deadline, a backend that cannot be reached right now),
// as opposed to an answer, even a refusal.
func unanswered(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, env.ErrUnavailable)
}

// BackendHealth is a backend's condition as the registry last saw it.
type BackendHealth struct {
	Condition env.Condition `json:"condition"`
	Detail    string        `json:"detail,omitempty"`
	// Since is when the condition was entered.
	Since time.Time `json:"since,omitzero"`
	// CheckedAt is when a health check last answered; zero for a backend
	// that has no health check (then only the registry's own calls tell).
	CheckedAt time.Time `json:"checked_at,omitzero"`
}

func (b *backendHealth) snapshot() BackendHealth {
	b.mu.Lock()
	defer b.mu.Unlock()
	return BackendHealth{Condition: b.h.Condition, Detail: b.h.Detail, Since: b.since, CheckedAt: b.checked}
}

// setCondition sets in.BackendCondition from what the registry last saw of
// its backend, for a process whose tree may still run.
func (r *Registry) setCondition(in *Info) {
	if !in.TreeRunning {
		return
	}
	if h, _ := r.condition(in.Backend); h.Condition != env.ConditionOK {
		in.BackendCondition = h.Condition
	}
}

// errBackendSick cancels a call whose backend a probe found not answering
// while the call waited for it.
var errBackendSick = errors.New("a health check found the backend not answering")

// callCtx bounds one call the registry makes on target's backend for a
// listing, a port look-up or a kill: it ends after d, and as soon as a
// health check finds the backend paused or unreachable, so that a call
// into a backend that has just stopped answering does not wait out its
// whole deadline. The health check is asked for at once when the last one
// is older than healthFresh. wrap turns the call's error into one that
// says so (matching env.ErrUnavailable) when that is what ended it.
func (r *Registry) callCtx(ctx context.Context, target string, d time.Duration) (cctx context.Context, wrap func(error) error, cancel func()) {
	cctx, cancelCause := context.WithCancelCause(ctx)
	tctx, cancelT := context.WithTimeout(cctx, d)
	slot := r.slotOf(target)
	if slot == nil {
		return tctx, func(err error) error { return err }, func() { cancelT(); cancelCause(nil) }
	}
	if time.Since(slot.health.lastChecked()) > healthFresh {
		slot.health.poke()
	}
	sick := slot.health.sickSignal()
	done := make(chan struct{})
	go func() {
		select {
		case <-sick:
			cancelCause(errBackendSick)
		case <-tctx.Done():
		case <-done:
		}
	}()
	wrap = func(err error) error {
		if err != nil && errors.Is(context.Cause(cctx), errBackendSick) {
			h, _, _ := slot.health.get()
			return fmt.Errorf("%s is %s (%s): %w", target, h.Condition, h.Detail, env.ErrUnavailable)
		}
		return err
	}
	return tctx, wrap, func() { close(done); cancelT(); cancelCause(nil) }
}
