package daemon

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/registry"
)

// followEvents subscribes to the daemon's event stream and returns the
// channel the events arrive on, once the subscription is in place.
func followEvents(t *testing.T, ctx context.Context, c *Client) <-chan registry.Event {
	t.Helper()
	ready := make(chan struct{})
	got := make(chan registry.Event, 1024)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		_ = c.FollowEvents(sctx, func() {
			select {
			case <-ready:
			default:
				close(ready)
			}
		}, func(ev registry.Event) error { got <- ev; return nil })
	}()
	select {
	case <-ready:
	case <-ctx.Done():
		require.Fail(t, "event stream not ready")
	}
	return got
}

// Every notified exit reaches the SSE stream with its status and output
// tail, although the started events alone overflow the global breaker;
// the history leaves out an exit a caller received through wait since.
func TestNotifiedExitsOverSSE(t *testing.T) {
	const jobs = registry.GlobalEventMax + 3
	c, _ := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	events := followEvents(t, ctx, c)

	want := map[string]int{}
	for i := range jobs {
		in, err := c.Start(ctx, registry.StartOptions{Command: fmt.Sprintf("printf 'job\\n\\033[1mresult %d\\033[0m\\n'; exit %d", i, i), Notify: true})
		require.NoError(t, err)
		want[in.ID] = i
	}
	got := map[string]registry.Event{}
	for len(got) < jobs {
		select {
		case ev := <-events:
			if _, ok := want[ev.ID]; ok && ev.Type == registry.EventExited {
				got[ev.ID] = ev
			}
		case <-ctx.Done():
			require.Failf(t, "exits missing", "%d of %d notified exits arrived", len(got), jobs)
		}
	}
	for id, i := range want {
		ev := got[id]
		assert.True(t, ev.Notify)
		if assert.NotNil(t, ev.Status, id) {
			assert.Equal(t, i, ev.Status.Code, id)
		}
		assert.Equal(t, fmt.Sprintf("job\nresult %d", i), ev.Tail, id)
	}

	// An exit the history already holds disappears from it once a caller
	// received the result.
	in, err := c.Start(ctx, registry.StartOptions{Command: "exit 9", Notify: true})
	require.NoError(t, err)
	isExit := func(ev registry.Event) bool { return ev.Type == registry.EventExited && ev.ID == in.ID }
	require.Eventually(t, func() bool {
		hist, err := c.History(ctx)
		return err == nil && slices.ContainsFunc(hist, isExit)
	}, generous, 5*time.Millisecond, "the exit reaches the history")
	wr, err := c.Wait(ctx, in.ID, 0)
	require.NoError(t, err)
	require.Equal(t, 9, wr.Status.Code)
	hist, err := c.History(ctx)
	require.NoError(t, err)
	assert.False(t, slices.ContainsFunc(hist, isExit), "a consumed exit is served again from the history")
}
