package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/corralhq/corral/env"
)

func TestOpenContainer(t *testing.T) {
	cli := requireEngine(t)
	ctx := testContext(t)
	name := startPlainContainer(t, cli)

	// By ID, the Name is still the container's name, so Refs match.
	res, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	require.NoError(t, err)
	e, err := Open(ctx, SchemeContainer+res.Container.ID[:12], Options{Logger: discardLogger()})
	require.NoError(t, err)
	if e.Name() != SchemeContainer+name {
		assert.Fail(t, fmt.Sprintf("Name = %q, want %q", e.Name(), SchemeContainer+name))
	}
	p, err := e.Start(ctx, env.Spec{Command: "echo hi; exit 4"})
	require.NoError(t, err)
	if st, err := p.Wait(ctx); err != nil || st != env.Exited(4) {
		assert.Fail(t, fmt.Sprintf("Wait = %v, %v", st, err))
	}
	p.Release()
	require.NoError(t, e.Close())
	// Close leaves a docker:// container running.
	assert.NoError(t, NewTransport(cli, name, "").checkRunning(ctx), "container after Close")
	if _, err := e.Start(ctx, env.Spec{Command: "true"}); !errors.Is(err, env.ErrReleased) {
		assert.Fail(t, fmt.Sprintf("Start after Close = %v, want ErrReleased", err))
	}
}

func TestOpenContainerErrors(t *testing.T) {
	cli := requireEngine(t)
	ctx := testContext(t)

	missing := "corral-missing-" + randomSuffix()
	_, err := Open(ctx, SchemeContainer+missing, Options{})
	assert.Truef(t, errors.Is(err, env.ErrSandboxGone) && strings.Contains(err.Error(), missing), "missing container: %v, want ErrSandboxGone naming it", err)

	stopped := startPlainContainer(t, cli)
	timeout := 1
	if _, err := cli.ContainerStop(ctx, stopped, client.ContainerStopOptions{Timeout: &timeout}); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	_, err = Open(ctx, SchemeContainer+stopped, Options{})
	assert.Truef(t, errors.Is(err, env.ErrSandboxGone) && strings.Contains(err.Error(), "docker start "+stopped), "stopped container: %v, want ErrSandboxGone naming the fix `docker start %s`", err, stopped)

	_, err = Open(ctx, SchemeContainer+"x", Options{Host: "unix:///nonexistent/corral.sock"})
	assert.Truef(t, errors.Is(err, env.ErrUnavailable), "no engine: %v, want ErrUnavailable", err)

	_, err = Open(ctx, "docker-image://corral-no-such-image-"+randomSuffix(), Options{Owner: "t-" + randomSuffix()})
	assert.Truef(t, err != nil && strings.Contains(err.Error(), "scripts/build-test-image.sh"), "missing image: %v", err)

	if _, err := Open(ctx, "docker-image://x?bogus=1", Options{}); err == nil || !strings.Contains(err.Error(), "bogus") {
		assert.Fail(t, fmt.Sprintf("bad option: %v", err))
	}
}

func TestOpenSandboxCloseRemovesUnlessPersist(t *testing.T) {
	cli := requireEngine(t)
	ctx := testContext(t)
	gone := func(name string) bool {
		_, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
		return cerrdefs.IsNotFound(err)
	}

	e, err := Open(ctx, "docker-image://"+testImage, Options{Owner: "t-" + randomSuffix(), Logger: discardLogger()})
	require.NoError(t, err)
	name := strings.TrimPrefix(e.Name(), SchemeContainer)
	if _, err := e.Start(ctx, env.Spec{Command: "sleep 300", Detach: true}); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	// By ID: Close renames the sandbox (corral-closed-ID) while the
	// engine deletes it.
	info, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	require.NoError(t, err)
	require.NoError(t, e.Close())
	require.NoError(t, WaitRemoved(ctx))
	assert.Truef(t, gone(info.Container.ID), "sandbox %s survived Close", name)
	assert.NoError(t, e.Close(), "second Close")

	persistName := "corral-persist-" + randomSuffix()
	e, err = Open(ctx, "docker-image://"+testImage+"?persist=true&name="+persistName, Options{Logger: discardLogger()})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = cli.ContainerRemove(context.Background(), persistName, client.ContainerRemoveOptions{Force: true})
	})
	if e.Name() != SchemeContainer+persistName {
		assert.Fail(t, fmt.Sprintf("Name = %q", e.Name()))
	}
	require.NoError(t, e.Close())
	assert.Falsef(t, gone(persistName), "persistent sandbox removed on Close")
}

// Removing the container under an open Environment makes its calls fail
// with ErrSandboxGone naming the container.
func TestOpenSandboxRemovedUnderEnvironment(t *testing.T) {
	cli := requireEngine(t)
	ctx := testContext(t)
	e, err := Open(ctx, "docker-image://"+testImage, Options{Owner: "t-" + randomSuffix(), Logger: discardLogger()})
	require.NoError(t, err)
	defer e.Close()
	name := strings.TrimPrefix(e.Name(), SchemeContainer)
	if _, err := cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true}); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	_, err = e.Start(ctx, env.Spec{Command: "true"})
	assert.Truef(t, errors.Is(err, env.ErrSandboxGone) && strings.Contains(err.Error(), name), "Start in a removed sandbox: %v, want ErrSandboxGone naming %s", err, name)
}

// The options reach the container: the workspace is mounted and the
// working directory, the user is the one asked for, the root filesystem is
// read-only while /tmp stays writable, and there is no network but lo.
func TestOpenSandboxOptions(t *testing.T) {
	requireEngine(t)
	ctx := testContext(t)
	ws := t.TempDir()
	require.NoError(t, os.Chmod(ws, 0o777))
	target := "docker-image://" + testImage + "?workspace=" + ws + "&user=1000:1000&readonly=true&network=none&memory=256m&cpus=0.5&pids=64"
	e, err := Open(ctx, target, Options{Owner: "t-" + randomSuffix(), Logger: discardLogger()})
	require.NoError(t, err)
	defer e.Close()
	p, err := e.Start(ctx, env.Spec{Command: `id -u; id -g; pwd; echo hello >f; grep -q '^[^ ]* / [^ ]* ro[ ,]' /proc/mounts && echo rootfs-ro; echo t >/tmp/t && echo tmp-ok; ls /sys/class/net; cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max`})
	require.NoError(t, err)
	defer p.Release()
	r, err := p.Output(ctx, 0)
	require.NoError(t, err)
	out, err := io.ReadAll(r)
	r.Close()
	require.NoError(t, err)
	if st, err := p.Wait(ctx); err != nil || !st.Success() {
		require.FailNow(t, fmt.Sprintf("Wait = %v, %v; output %q", st, err, out))
	}
	want := "1000\n1000\n/workspace\nrootfs-ro\ntmp-ok\nlo\n64\n"
	assert.Truef(t, string(out) == want, "output %q, want %q", out, want)
	if data, err := os.ReadFile(filepath.Join(ws, "f")); err != nil || string(data) != "hello\n" {
		assert.Fail(t, fmt.Sprintf("file written in /workspace not in the host directory: %q, %v", data, err))
	}
}
