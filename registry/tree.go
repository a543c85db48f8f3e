package registry

import (
	"context"
	"errors"
	"time"

	"github.com/corralhq/corral/env"
)

// Leftovers: after the leader exits, followTree keeps looking at the tree
// through Process.Survivors, so that what the leader left running stays
// visible (Info.Leftover), killable and unremovable until it is gone.

// followTree watches what the leader left running after its exit (`cmd
// &`, a server that daemonised): it counts it (Info.Leftover), collects
// the output it writes where the backend can replay output, and closes
// treeDone once nothing of the tree is left. It polls Survivors, fast at
// first and then once a second; a signal of ours wakes it at once.
//
// When ctx ends (the registry is closing) the tree is left as last seen,
// not recorded gone: Close's final checkpoint must keep it running, so
// that the next registry follows it again.
func (p *proc) followTree(ctx context.Context, h env.Process) {
	defer func() {
		if ctx.Err() == nil {
			p.treeEnded()
		}
	}()
	delay := 10 * time.Millisecond
	for {
		surv, err := p.treeLook(ctx, h)
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

// catchUp copies what the tree wrote since the buffer's end: a stream
// re-opened after the exit ends at the output written so far.
func (p *proc) catchUp(ctx context.Context, h env.Process) {
	release, err := p.outputTurn(ctx)
	if err != nil {
		return
	}
	defer release()
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
	changed := p.setLeftover(0)
	close(p.treeDone)
	if changed {
		p.r.stateChanged()
	}
	p.dropPending()
}

// liveTree returns how many processes of a finished process's tree still
// run, looking now rather than trusting followTree's last look, which may
// not have happened yet right after the exit.
func (p *proc) liveTree(ctx context.Context) int {
	if !p.treeLive.Load() {
		return 0
	}
	h := p.currentHandle()
	if h == nil {
		return 0
	}
	surv, err := p.treeLook(ctx, h)
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
