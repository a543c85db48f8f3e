package registry

import (
	"context"
	"fmt"
	"time"
)

// Waiting: Poll reads output since an offset; Wait and WaitTree block
// until the leader (or the whole tree) is done, bounded by a timeout.

// doneWait bounds the wait for the final state to be recorded (the output
// stream draining) after the process exited.
const doneWait = 10 * time.Second

// Poll returns the process's state and the output from byte cursor since
// on (what the buffer still holds: see PollResult). It does not block.
// Pass the returned Next as since to get only new output next time.
//
// For a process that had finished before a restart, the first Poll from
// an offset before the end reads its output back from the sandbox, and
// fails, saying why, when the sandbox no longer has it.
func (r *Registry) Poll(ctx context.Context, id string, since int64) (PollResult, error) {
	p, err := r.lookup(id)
	if err != nil {
		return PollResult{}, err
	}
	// The state is read before the output: a final state guarantees the
	// output read after it is complete.
	in := p.info()
	if err := p.loadOutput(ctx, since); err != nil {
		return PollResult{}, err
	}
	c := p.buf.ReadSince(since)
	// A process restored finished whose output was not needed (since at
	// its end) and so not read back: its end is the recorded size.
	c.Next = max(c.Next, in.OutputBytes)
	in.OutputBytes = c.Next
	if in.State.Final() {
		p.finalSeen.Store(true)
	}
	return PollResult{Info: in, Output: c.Data, OmittedBytes: c.Omitted, OmittedAt: c.OmittedAt, Next: c.Next}, nil
}

// Wait blocks until the process reaches a final state and returns its
// Info. timeout 0 waits until ctx is done. When the timeout elapses first
// the error matches ErrWaitTimeout and the Info is the current snapshot.
// It returns when the leader exits, even if the leader left part of its
// tree running (Info.Leftover); WaitTree waits for that too.
func (r *Registry) Wait(ctx context.Context, id string, timeout time.Duration) (Info, error) {
	return r.wait(ctx, id, timeout, false)
}

// WaitTree is Wait until the leader exited and nothing of its tree is
// left: a daemonised server, a `cmd &` the command did not wait for.
func (r *Registry) WaitTree(ctx context.Context, id string, timeout time.Duration) (Info, error) {
	return r.wait(ctx, id, timeout, true)
}

func (r *Registry) wait(ctx context.Context, id string, timeout time.Duration, tree bool) (Info, error) {
	p, err := r.lookup(id)
	if err != nil {
		return Info{}, err
	}
	done, what := p.done, "still"
	if tree {
		done, what = p.treeDone, "or its tree still"
	}
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	} else if timeout < 0 {
		return Info{}, fmt.Errorf("%w: negative wait timeout %s", ErrInvalidOptions, timeout)
	}
	p.enterWait()
	// Logged once counted: from this line on, the end is this caller's
	// and its exited event will not be delivered.
	r.log.Debug("wait: blocked until the process ends", "id", p.id)
	var err2 error
	select {
	case <-done:
	case <-timer:
		err2 = fmt.Errorf("%w: %s %s %s after %s; wait again, or kill it", ErrWaitTimeout, p.id, what, runningWords(p.info()), timeout)
	case <-ctx.Done():
		err2 = ctx.Err()
	case <-r.ctx.Done():
		err2 = fmt.Errorf("registry: wait %s: %w", p.id, ErrClosed)
	}
	if p.leaveWait() && (!tree || !p.treeLive.Load()) {
		// Ended, even if a timeout fired at the same moment: the caller
		// gets the result, which its exited event then no longer repeats.
		return p.info(), nil
	}
	return p.info(), err2
}

// runningWords says what still runs of a process, for messages: its
// state, or how many processes its exited leader left running.
func runningWords(in Info) string {
	if in.State.Final() && in.TreeRunning {
		return fmt.Sprintf("running (%s, %d left running)", in.State, in.Leftover)
	}
	return string(in.State)
}

// awaitDone waits, bounded, for the final state to be recorded.
func (p *proc) awaitDone(ctx context.Context) {
	t := time.NewTimer(doneWait)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
	case <-ctx.Done():
	case <-p.r.ctx.Done():
	}
}
