package docker

import (
	"context"
	"errors"
	"github.com/stretchr/testify/require"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	if err != nil {
		t.Fatal(err)
	}
	e, err := Open(ctx, SchemeContainer+res.Container.ID[:12], Options{Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if e.Name() != SchemeContainer+name {
		t.Errorf("Name = %q, want %q", e.Name(), SchemeContainer+name)
	}
	p, err := e.Start(ctx, env.Spec{Command: "echo hi; exit 4"})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(ctx); err != nil || st != env.Exited(4) {
		t.Errorf("Wait = %v, %v", st, err)
	}
	p.Release()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// Close leaves a docker:// container running.
	if err := NewTransport(cli, name, "").checkRunning(ctx); err != nil {
		t.Errorf("container after Close: %v", err)
	}
	if _, err := e.Start(ctx, env.Spec{Command: "true"}); !errors.Is(err, env.ErrReleased) {
		t.Errorf("Start after Close = %v, want ErrReleased", err)
	}
}

func TestOpenContainerErrors(t *testing.T) {
	cli := requireEngine(t)
	ctx := testContext(t)

	missing := "corral-missing-" + randomSuffix()
	_, err := Open(ctx, SchemeContainer+missing, Options{})
	if !errors.Is(err, env.ErrSandboxGone) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing container: %v, want ErrSandboxGone naming it", err)
	}

	stopped := startPlainContainer(t, cli)
	timeout := 1
	if _, err := cli.ContainerStop(ctx, stopped, client.ContainerStopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, SchemeContainer+stopped, Options{})
	if !errors.Is(err, env.ErrSandboxGone) || !strings.Contains(err.Error(), "docker start "+stopped) {
		t.Errorf("stopped container: %v, want ErrSandboxGone naming the fix `docker start %s`", err, stopped)
	}

	_, err = Open(ctx, SchemeContainer+"x", Options{Host: "unix:///nonexistent/corral.sock"})
	if !errors.Is(err, env.ErrUnavailable) {
		t.Errorf("no engine: %v, want ErrUnavailable", err)
	}

	_, err = Open(ctx, "docker-image://corral-no-such-image-"+randomSuffix(), Options{Owner: "t-" + randomSuffix()})
	if err == nil || !strings.Contains(err.Error(), "scripts/build-test-image.sh") {
		t.Errorf("missing image: %v", err)
	}

	if _, err := Open(ctx, "docker-image://x?bogus=1", Options{}); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("bad option: %v", err)
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
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(e.Name(), SchemeContainer)
	if _, err := e.Start(ctx, env.Spec{Command: "sleep 300", Detach: true}); err != nil {
		t.Fatal(err)
	}
	// By ID: Close renames the sandbox (corral-closed-ID) while the
	// engine deletes it.
	info, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	require.NoError(t, err)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	require.NoError(t, WaitRemoved(ctx))
	if !gone(info.Container.ID) {
		t.Errorf("sandbox %s survived Close", name)
	}
	if err := e.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	persistName := "corral-persist-" + randomSuffix()
	e, err = Open(ctx, "docker-image://"+testImage+"?persist=true&name="+persistName, Options{Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = cli.ContainerRemove(context.Background(), persistName, client.ContainerRemoveOptions{Force: true})
	})
	if e.Name() != SchemeContainer+persistName {
		t.Errorf("Name = %q", e.Name())
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if gone(persistName) {
		t.Errorf("persistent sandbox removed on Close")
	}
}

// Removing the container under an open Environment makes its calls fail
// with ErrSandboxGone naming the container.
func TestOpenSandboxRemovedUnderEnvironment(t *testing.T) {
	cli := requireEngine(t)
	ctx := testContext(t)
	e, err := Open(ctx, "docker-image://"+testImage, Options{Owner: "t-" + randomSuffix(), Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	name := strings.TrimPrefix(e.Name(), SchemeContainer)
	if _, err := cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	_, err = e.Start(ctx, env.Spec{Command: "true"})
	if !errors.Is(err, env.ErrSandboxGone) || !strings.Contains(err.Error(), name) {
		t.Errorf("Start in a removed sandbox: %v, want ErrSandboxGone naming %s", err, name)
	}
}

// The options reach the container: the workspace is mounted and the
// working directory, the user is the one asked for, the root filesystem is
// read-only while /tmp stays writable, and there is no network but lo.
func TestOpenSandboxOptions(t *testing.T) {
	requireEngine(t)
	ctx := testContext(t)
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	target := "docker-image://" + testImage + "?workspace=" + ws + "&user=1000:1000&readonly=true&network=none&memory=256m&cpus=0.5&pids=64"
	e, err := Open(ctx, target, Options{Owner: "t-" + randomSuffix(), Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	p, err := e.Start(ctx, env.Spec{Command: `id -u; id -g; pwd; echo hello >f; grep -q '^[^ ]* / [^ ]* ro[ ,]' /proc/mounts && echo rootfs-ro; echo t >/tmp/t && echo tmp-ok; ls /sys/class/net; cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max`})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	r, err := p.Output(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(r)
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(ctx); err != nil || !st.Success() {
		t.Fatalf("Wait = %v, %v; output %q", st, err, out)
	}
	want := "1000\n1000\n/workspace\nrootfs-ro\ntmp-ok\nlo\n64\n"
	if string(out) != want {
		t.Errorf("output %q, want %q", out, want)
	}
	if data, err := os.ReadFile(filepath.Join(ws, "f")); err != nil || string(data) != "hello\n" {
		t.Errorf("file written in /workspace not in the host directory: %q, %v", data, err)
	}
}
