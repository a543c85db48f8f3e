// Package backoff paces loops that look for something no event announces:
// a poll for new output, a retry of a transport that is down.
//
//   - [Backoff] yields the waits: Min first, each next one Factor times
//     longer, never above Max; [Backoff.Reset] starts again from Min when
//     the loop saw activity (new output, a signal), so it reacts fast
//     while things happen and costs little while nothing does.
//   - [Sleep] waits one interval, and gives up as soon as the caller's
//     context ends or its stop channel closes.
//
// Decisions:
//   - No jitter: the loops paced here poll their own process or sandbox,
//     so there is no herd of clients to spread. A reconnect to a shared
//     server wants jitter and does its own (env/ssh).
//   - A Backoff is configured by its exported fields and has no
//     constructor: a zero cursor means "start at Min", so a Backoff works
//     as a plain struct field and Reset needs no copy of the settings.
package backoff

import (
	"context"
	"os"
	"time"
)

// Backoff yields growing waits between polls. Set Min > 0, Max >= Min and
// Factor > 1 before the first Next; they are used as they are. Not safe
// for concurrent use.
type Backoff struct {
	Min    time.Duration // the first wait, and the first after Reset
	Max    time.Duration // no wait is longer
	Factor float64       // each wait is the previous one times Factor

	cur time.Duration // the last wait returned; 0: none since Reset
}

// Next returns the wait to take now and makes the following one longer.
func (b *Backoff) Next() time.Duration {
	if b.cur == 0 {
		b.cur = b.Min
	} else {
		b.cur = min(time.Duration(float64(b.cur)*b.Factor), b.Max)
	}
	return b.cur
}

// Reset makes the next wait Min again: something happened, look soon.
func (b *Backoff) Reset() { b.cur = 0 }

// Sleep waits d. It returns nil once d has passed, ctx.Err() if ctx ends
// first, and os.ErrClosed if stop is closed first (a nil stop never is).
func Sleep(ctx context.Context, d time.Duration, stop <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-stop:
		return os.ErrClosed
	}
}
