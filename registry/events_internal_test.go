package registry

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDevServerEventsBypassGlobalRateLimit: during a cooldown that holds
// back a flood of watch matches, a dev server's ready, crashed and
// ttl_expired events still arrive, and do not count towards the limit.
func TestDevServerEventsBypassGlobalRateLimit(t *testing.T) {
	b := newEventBus(slog.New(slog.DiscardHandler), 1024)
	defer b.close()
	sub := b.subscribe()
	defer sub.Close()
	for range GlobalEventMax + 3 {
		b.publish(Event{Type: EventWatchMatch, ID: "proc_000000000001"})
	}
	for _, typ := range []EventType{EventReady, EventCrashed, EventTTLExpired} {
		b.publish(Event{Type: typ, ID: "proc_000000000002"})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []EventType
	for range GlobalEventMax + 3 {
		ev, err := sub.Next(ctx)
		require.NoError(t, err)
		got = append(got, ev.Type)
	}
	require.Equal(t, []EventType{EventReady, EventCrashed, EventTTLExpired}, got[GlobalEventMax:])
}
