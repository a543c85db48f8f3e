package registry

import (
	"context"
	"fmt"
	"time"

	"github.com/corralhq/corral/env"
)

// Deadlines of a background process: StartOptions.TTL kills the tree at
// StartedAt + TTL (a ttl_expired event first; Info.TimedOut "ttl"), and
// StartOptions.IdleTimeout kills it after that long without output
// (Info.TimedOut "idle_timeout"), as Run's IdleTimeout does. One goroutine
// per process that has either sleeps until the nearer one; it ends with
// the tree.

// expiresAt is when p's TTL runs out; zero without a TTL or before the
// process started. The caller holds p.mu.
func (p *proc) expiresAtLocked() time.Time {
	if p.opts.TTL <= 0 || p.startedAt.IsZero() {
		return time.Time{}
	}
	return p.startedAt.Add(p.opts.TTL)
}

// armDeadlines starts the deadline goroutine of a running process with a
// TTL or an idle timeout.
func (p *proc) armDeadlines() {
	if p.opts.TTL <= 0 && p.opts.IdleTimeout <= 0 {
		return
	}
	p.r.goTracked(func() { p.watchDeadlines(p.r.ctx) })
}

func (p *proc) watchDeadlines(ctx context.Context) {
	expires := p.expiresAt()
	idle := p.opts.IdleTimeout
	for {
		now := time.Now()
		var kind string
		var wait time.Duration = -1
		if !expires.IsZero() {
			if left := expires.Sub(now); left <= 0 {
				kind = TimedOutTTL
			} else {
				wait = left
			}
		}
		if kind == "" && idle > 0 {
			quiet := now.Sub(time.Unix(0, p.lastOutput.Load()))
			if quiet >= idle {
				kind = TimedOutIdle
			} else if left := idle - quiet; wait < 0 || left < wait {
				wait = left
			}
		}
		if kind != "" {
			p.expire(ctx, kind)
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-p.treeDone:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// expire kills the tree because a deadline of kind passed.
func (p *proc) expire(ctx context.Context, kind string) {
	in := p.info()
	if kind == TimedOutTTL {
		p.r.ev.publish(Event{Type: EventTTLExpired, ID: p.id, Command: p.opts.Command, State: in.State,
			Summary: fmt.Sprintf("%s: its TTL of %s ran out; killing its tree: %s", p.label(), p.opts.TTL, clip(p.opts.Command, 200))})
	}
	p.r.log.Debug("deadline passed; killing the tree", "id", p.id, "kind", kind)
	_, grace, _ := p.r.killParams("", 0)
	kctx, cancel := context.WithTimeout(ctx, grace+killAfterCancel)
	defer cancel()
	if _, err := p.kill(kctx, killPlan{sig: env.SIGTERM, grace: grace, escalate: true, reason: StateTimedOut, timedOut: kind}); err != nil && ctx.Err() == nil {
		p.r.log.Warn("kill after a deadline failed", "id", p.id, "kind", kind, "err", err)
	}
}
