package registry

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

// TestKillAllTakesKillOptions: KillAll checks and runs the options Kill
// does. Force was Kill's alone, so `corral kill --all --force` sent TERM.
func TestKillAllTakesKillOptions(t *testing.T) {
	r := newLocal(t, nil)
	ctx := context.Background()
	label := map[string]string{"t": marker()}

	in, err := r.Start(ctx, StartOptions{Command: `trap '' TERM; echo ready; sleep 60`, Labels: label})
	require.NoError(t, err)
	waitOutput(t, r, in.ID, "ready\n")

	_, err = r.KillAll(ctx, KillAllOptions{Labels: label, Force: true, Escalate: new(false)})
	require.ErrorIs(t, err, ErrInvalidOptions, "force and escalate=false contradict each other")

	res, err := r.KillAll(ctx, KillAllOptions{Labels: label, Grace: 200 * time.Millisecond, Escalate: new(false)})
	require.NoError(t, err)
	require.Len(t, res, 1)
	assert.True(t, res[0].StillRunning, "TERM is ignored and nothing escalates: %+v", res[0])

	// A grace far longer than the test: only SIGKILL as the first signal
	// ends the tree in time.
	res, err = r.KillAll(ctx, KillAllOptions{Labels: label, Grace: time.Hour, Force: true})
	require.NoError(t, err)
	require.Len(t, res, 1)
	assert.Equal(t, env.SIGKILL, res[0].Signal)
	assert.Equal(t, StateKilled, res[0].State)
}

// TestKillEscalateTrueIsTheDefault: an explicit escalate=true is the
// default kill.
func TestKillEscalateTrueIsTheDefault(t *testing.T) {
	r := newLocal(t, nil)
	ctx := context.Background()
	in, err := r.Start(ctx, StartOptions{Command: `trap '' TERM; echo ready; sleep 60`})
	require.NoError(t, err)
	waitOutput(t, r, in.ID, "ready\n")
	res, err := r.Kill(ctx, in.ID, KillOptions{Grace: 200 * time.Millisecond, Escalate: new(true)})
	require.NoError(t, err)
	assert.True(t, res.Escalated)
	assert.Equal(t, StateKilled, res.State)
}
