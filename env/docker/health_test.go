package docker

import (
	"context"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

// TestHealth: the Environment's health check tells a running container
// (ok), a paused one (with the command that unpauses it) and a removed
// one (gone), by asking the engine only: nothing is run in the container,
// so that no exec can be caught half-way by the pause.
func TestHealth(t *testing.T) {
	cli := requireEngine(t)
	name := startPlainContainer(t, cli)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := Open(ctx, SchemeContainer+name, Options{Residents: -1})
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	hc, ok := e.(env.HealthChecker)
	require.True(t, ok, "%T does not implement env.HealthChecker", e)
	check := func() env.Health {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return hc.Health(ctx)
	}
	assert.Equal(t, env.Health{Condition: env.ConditionOK}, check())

	_, err = cli.ContainerPause(ctx, name, client.ContainerPauseOptions{})
	require.NoError(t, err)
	h := check()
	assert.Equal(t, env.ConditionPaused, h.Condition)
	assert.Contains(t, h.Detail, "docker unpause "+name)
	_, err = cli.ContainerUnpause(ctx, name, client.ContainerUnpauseOptions{})
	require.NoError(t, err)
	assert.Equal(t, env.ConditionOK, check().Condition)

	_, err = cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true})
	require.NoError(t, err)
	h = check()
	assert.Equal(t, env.ConditionGone, h.Condition)
	assert.Contains(t, h.Detail, name)
}
