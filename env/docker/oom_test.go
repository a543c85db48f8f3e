package docker

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

// startOOMContainer starts a container of the test image limited to 64 MiB
// whose main command waits for /tmp/hog and then becomes a memory hog.
func startOOMContainer(t *testing.T, cli *client.Client) string {
	t.Helper()
	ctx := testContext(t)
	name := "corral-test-oom-" + randomSuffix()
	limit := int64(64 << 20)
	_, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: name,
		Config: &container.Config{
			Image:  testImage,
			Cmd:    []string{"/bin/sh", "-c", "while ! [ -f /tmp/hog ]; do sleep 0.05; done; exec tail /dev/zero"},
			Labels: map[string]string{"dev.corral.test": "true"},
		},
		HostConfig: &container.HostConfig{Resources: container.Resources{Memory: limit, MemorySwap: limit}},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true})
	})
	_, err = cli.ContainerStart(ctx, name, client.ContainerStartOptions{})
	require.NoError(t, err)
	return name
}

// TestOOMKilled runs a memory hog for real in a container limited to
// 64 MiB: Wait reports it OOM-killed (exited by SIGKILL, OOMKilled set),
// while a process of the same container ended by a plain kill -9 after
// that is not. Then the container's main process is OOM-killed: a
// process that ran in it is gone with an error that says why, and so is
// opening the container again.
func TestOOMKilled(t *testing.T) {
	cli := requireEngine(t)
	name := startOOMContainer(t, cli)
	ctx := testContext(t)
	e, err := Open(ctx, SchemeContainer+name, Options{Logger: discardLogger()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	run := func(command string) (env.Process, env.ExitStatus) {
		t.Helper()
		p, err := e.Start(ctx, env.Spec{Command: command})
		require.NoError(t, err)
		st, err := p.Wait(ctx)
		require.NoError(t, err, command)
		return p, st
	}

	_, st := run("tail /dev/zero")
	assert.True(t, st.OOMKilled, "%v", st)
	assert.Equal(t, 137, st.ShellCode())

	sleeper, err := e.Start(ctx, env.Spec{Command: "exec sleep 60"})
	require.NoError(t, err)
	_, st = run("kill -9 " + strconv.Itoa(sleeper.PID()))
	require.True(t, st.Success(), "kill -9: %v", st)
	st, err = sleeper.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, env.Signaled(env.SIGKILL), st, "a plain kill -9 is no OOM kill")

	// The main process: the container stops, and with it what ran there.
	bystander, err := e.Start(ctx, env.Spec{Command: "exec sleep 60"})
	require.NoError(t, err)
	_, st = run("touch /tmp/hog")
	require.True(t, st.Success(), "touch: %v", st)
	_, err = bystander.Wait(ctx)
	require.Error(t, err)
	t.Logf("the bystander: %v", err)
	assert.True(t, errors.Is(err, env.ErrSandboxGone), "%v", err)
	assert.Contains(t, err.Error(), "ran out of memory")
	assert.Less(t, len(err.Error()), 400, "a short error: %s", err)

	_, err = Open(ctx, SchemeContainer+name, Options{Logger: discardLogger()})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ran out of memory")
	assert.True(t, strings.Contains(err.Error(), "docker start "+name), "%v", err)
}
