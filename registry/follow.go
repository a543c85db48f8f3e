package registry

import "context"

// Follow reads id's output from byte offset since and hands fn every
// snapshot that brought output (or a gap: OmittedBytes), until the process
// ends — then the last snapshot, with its final Info, is returned after fn
// saw all of the output — or ctx is done, or fn returns false.
//
// It waits for the buffer to grow or the process to end, so a byte reaches
// fn as soon as the registry has it, and a quiet process costs its
// follower nothing.
func (r *Registry) Follow(ctx context.Context, id string, since int64, fn func(PollResult) bool) (PollResult, error) {
	p, err := r.lookup(id)
	if err != nil {
		return PollResult{}, err
	}
	for {
		// Taken before the read: whatever arrives after the read closes
		// it, so nothing written is left waiting.
		grown := p.buf.changed()
		pr, err := r.Poll(ctx, p.id, since)
		if err != nil {
			return pr, err
		}
		if len(pr.Output) > 0 || pr.OmittedBytes > 0 {
			if !fn(pr) {
				return pr, nil
			}
		}
		since = pr.Next
		if pr.State.Final() {
			// Poll reads the state before the output: this was all of it.
			return pr, nil
		}
		select {
		case <-ctx.Done():
			return pr, ctx.Err()
		case <-grown:
		case <-p.done:
			// The final state is recorded once all of the output is in
			// the buffer: the next Poll reads the rest and returns.
		case <-r.ctx.Done():
			// Closing: the next Poll says so.
		}
	}
}
