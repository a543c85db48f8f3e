package docker

import (
	"context"
	"fmt"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

func TestOwnerFor(t *testing.T) {
	a, b := OwnerFor("daemon /home/a/.local/state/corral"), OwnerFor("daemon /home/b/.local/state/corral")
	require.NotEqual(t, a, b, "two supervisors get two owners")
	require.Equal(t, a, OwnerFor("daemon /home/a/.local/state/corral"), "a restarted supervisor is the same owner")
	require.True(t, strings.HasPrefix(a, DefaultOwner()+"/"), "%q names the user and machine", a)

	tg := mustTarget(t, "docker-image://alpine?network=none")
	require.NotEqual(t, tg.containerName(a), tg.containerName(b), "the default container name depends on the owner")

	sh := mustTarget(t, "docker-image://alpine?network=none&shared=true")
	require.True(t, sh.Sandbox.Shared)
	require.Equal(t, "docker-image://alpine?network=none&shared=true", sh.String())
	require.Equal(t, tg.configHash(), sh.configHash(), "shared does not change what the sandbox is")
	_, err := ParseTarget("docker-image://alpine?shared=maybe")
	require.ErrorContains(t, err, "shared")
}

// TestOwnersHaveTheirOwnSandbox opens one docker-image target for two
// owners (two daemons): two containers, and one's Close leaves the
// other's running. With shared=true both use one container, which
// neither Close removes.
func TestOwnersHaveTheirOwnSandbox(t *testing.T) {
	cli := requireEngine(t)
	ctx := testContext(t)
	exists := func(name string) bool {
		_, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
		require.True(t, err == nil || cerrdefs.IsNotFound(err), fmt.Sprintln(err))
		return err == nil
	}
	run := func(e env.Environment) {
		t.Helper()
		p, err := e.Start(ctx, env.Spec{Command: "true"})
		require.NoError(t, err)
		st, err := p.Wait(ctx)
		require.NoError(t, err)
		require.Equal(t, env.Exited(0), st)
	}
	open := func(target, owner string) env.Environment {
		t.Helper()
		e, err := Open(ctx, target, Options{Owner: owner, Logger: discardLogger()})
		require.NoError(t, err)
		name := strings.TrimPrefix(e.Name(), SchemeContainer)
		t.Cleanup(func() {
			_ = e.Close()
			_, _ = cli.ContainerRemove(context.Background(), name, client.ContainerRemoveOptions{Force: true})
		})
		return e
	}
	ownerA, ownerB := OwnerFor("a "+randomSuffix()), OwnerFor("b "+randomSuffix())

	target := "docker-image://" + testImage + "?network=none"
	a, b := open(target, ownerA), open(target, ownerB)
	require.NotEqual(t, a.Name(), b.Name(), "two owners share a sandbox")
	run(a)
	run(b)
	require.NoError(t, a.Close())
	require.NoError(t, WaitRemoved(ctx))
	require.False(t, exists(strings.TrimPrefix(a.Name(), SchemeContainer)), "Close removes the owner's sandbox")
	require.True(t, exists(strings.TrimPrefix(b.Name(), SchemeContainer)), "Close removed another owner's sandbox")
	run(b)

	shared := "docker-image://" + testImage + "?network=none&shared=true&name=corral-shared-" + randomSuffix()
	sa, sb := open(shared, ownerA), open(shared, ownerB)
	require.Equal(t, sa.Name(), sb.Name(), "shared=true: one sandbox for both owners")
	run(sa)
	require.NoError(t, sa.Close())
	require.NoError(t, WaitRemoved(ctx))
	require.True(t, exists(strings.TrimPrefix(sb.Name(), SchemeContainer)), "Close removed a shared sandbox")
	run(sb)
}
