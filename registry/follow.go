package registry

import (
	"context"
	"time"
)

// Follow polls id's output from byte offset since and hands fn every
// snapshot that brought output (or a gap: OmittedBytes), until the process
// ends — then the last snapshot, with its final Info, is returned after fn
// saw all of the output — or ctx is done, or fn returns false. The
// registry has no output notification, so Follow polls adaptively: every
// 10 ms while output flows, backing off to 250 ms while it is quiet.
func (r *Registry) Follow(ctx context.Context, id string, since int64, fn func(PollResult) bool) (PollResult, error) {
	interval := 10 * time.Millisecond
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		pr, err := r.Poll(ctx, id, since)
		if err != nil {
			return pr, err
		}
		if len(pr.Output) > 0 || pr.OmittedBytes > 0 {
			if !fn(pr) {
				return pr, nil
			}
			interval = 10 * time.Millisecond
		} else {
			interval = min(2*interval, 250*time.Millisecond)
		}
		since = pr.Next
		if pr.State.Final() {
			// Poll reads the state before the output: this was all of it.
			return pr, nil
		}
		t.Reset(interval)
		select {
		case <-ctx.Done():
			return pr, ctx.Err()
		case <-t.C:
		}
	}
}
