package ssh

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/ssh/sshtest"
)

// TestHealth: the check is ok on a live connection; when the route goes
// silent (the connection frozen in both directions) it says unreachable
// within its deadline, and a second check does not send a second
// keepalive; when sshd is gone, unreachable with why.
func TestHealth(t *testing.T) {
	srv := sshtest.Start(t)
	d := &recordingDialer{}
	opts := serverOptions(t, srv)
	opts.Dial = d.Dial
	opts.ReconnectMin, opts.ReconnectMax = 50*time.Millisecond, 200*time.Millisecond
	tr := dialServer(t, srv, opts)
	check := func() env.Health {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return tr.Health(ctx)
	}
	h := check()
	require.Equal(t, env.ConditionOK, h.Condition, h.Detail)

	d.last().Freeze()
	h = check()
	assert.Equal(t, env.ConditionUnreachable, h.Condition)
	assert.Contains(t, h.Detail, "no reply to a keepalive")
	h = check()
	assert.Equal(t, env.ConditionUnreachable, h.Condition)
	assert.Contains(t, h.Detail, "the last check's keepalive has no reply yet")

	d.last().Close() // the frozen connection dies; the supervisor redials
	require.Eventually(t, func() bool { return check().Condition == env.ConditionOK }, condWait, condPoll,
		"ok again once the connection is re-established")

	srv.Stop()
	require.Eventually(t, func() bool {
		h = check()
		return h.Condition == env.ConditionUnreachable
	}, condWait, condPoll)
	assert.NotEmpty(t, h.Detail, "why: the connection is down, or its keepalive failed")
}
