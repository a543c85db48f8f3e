package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// mustTarget parses a target or fails the test.
func mustTarget(t *testing.T, s string) Target {
	t.Helper()
	tg, err := ParseTarget(s)
	require.NoError(t, err)
	return tg
}

func TestEnsureSandboxCreatesHardenedContainer(t *testing.T) {
	cli := requireEngine(t)
	ctx := testContext(t)
	owner := "test-" + randomSuffix()
	tg := mustTarget(t, "docker-image://"+testImage+"?network=none&pids=200")

	sb, err := ensureSandbox(ctx, cli, tg, owner, discardLogger())
	require.NoError(t, err)
	t.Cleanup(func() { _ = sb.remove(testContext(t)) })
	if sb.name != tg.containerName(owner) {
		assert.Fail(t, fmt.Sprintf("sandbox name %q, want the derived %q", sb.name, tg.containerName(owner)))
	}
	res, err := cli.ContainerInspect(ctx, sb.id, client.ContainerInspectOptions{})
	require.NoError(t, err)
	c := res.Container
	require.Truef(t, c.State.Running, "sandbox not running: %+v", c.State)
	hc := c.HostConfig
	assert.Truef(t, hc.Init != nil && *hc.Init && slices.Contains(hc.SecurityOpt, "no-new-privileges:true") && hc.PidsLimit != nil && *hc.PidsLimit == 200 && hc.NetworkMode == "none" && len(hc.CapAdd) == len(Capabilities), "engine-side host config not hardened: init %v secopt %v pids %v net %q capadd %v", hc.Init, hc.SecurityOpt, hc.PidsLimit, hc.NetworkMode, hc.CapAdd)
	assert.Truef(t, c.Config.Labels[LabelOwner] == owner && c.Config.Labels[LabelManaged] == "true", "labels %v", c.Config.Labels)

	assert.True(t, c.HostConfig.AutoRemove, "a sandbox that is not kept is not AutoRemove: the engine would leave it behind when it stops")

	// Found again, not duplicated.
	again, err := ensureSandbox(ctx, cli, tg, owner, discardLogger())
	require.Truef(t, err == nil && again.id == sb.id, "second ensureSandbox: %v, id %s want %s", err, again.id, sb.id)
	// Stopped (a host reboot, a `docker stop`), it is deleted by the
	// engine: its processes are gone anyway, and a new one is made.
	timeout := 1
	if _, err := cli.ContainerStop(ctx, sb.id, client.ContainerStopOptions{Timeout: &timeout}); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	again, err = ensureSandbox(ctx, cli, tg, owner, discardLogger())
	require.Truef(t, err == nil && again.id != sb.id, "ensureSandbox after the sandbox stopped: %v, id %s, want a new one", err, again.id)
	t.Cleanup(func() { _ = again.remove(testContext(t)) })
	if _, err := cli.ContainerInspect(ctx, sb.id, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		assert.Fail(t, fmt.Sprintf("stopped sandbox still there: %v", err))
	}
	assert.NoError(t, NewTransport(cli, again.id, "").checkRunning(ctx), "new sandbox")
	sb = again

	// The same name with other options, or for another owner, is refused
	// with the fix.
	other := mustTarget(t, "docker-image://"+testImage+"?network=none&pids=300&name="+sb.name)
	if _, err := ensureSandbox(ctx, cli, other, owner, discardLogger()); err == nil || !strings.Contains(err.Error(), "docker rm -f "+sb.name) {
		assert.Fail(t, fmt.Sprintf("same name, other options: %v", err))
	}
	same := mustTarget(t, "docker-image://"+testImage+"?network=none&pids=200&name="+sb.name)
	if _, err := ensureSandbox(ctx, cli, same, "someone-else", discardLogger()); err == nil || !strings.Contains(err.Error(), "belongs to") {
		assert.Fail(t, fmt.Sprintf("same name, other owner: %v", err))
	}
}

// A persistent sandbox that stopped is started again, the same container.
func TestEnsureSandboxRestartsStoppedPersistent(t *testing.T) {
	cli := requireEngine(t)
	ctx := testContext(t)
	tg := mustTarget(t, "docker-image://"+testImage+"?persist=true")
	sb, err := ensureSandbox(ctx, cli, tg, "test-"+randomSuffix(), discardLogger())
	require.NoError(t, err)
	t.Cleanup(func() { _ = sb.remove(testContext(t)) })
	res, err := cli.ContainerInspect(ctx, sb.id, client.ContainerInspectOptions{})
	require.NoError(t, err)
	assert.False(t, res.Container.HostConfig.AutoRemove, "a persistent sandbox is AutoRemove")
	timeout := 1
	if _, err := cli.ContainerStop(ctx, sb.id, client.ContainerStopOptions{Timeout: &timeout}); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	again, err := ensureSandbox(ctx, cli, tg, res.Container.Config.Labels[LabelOwner], discardLogger())
	require.Truef(t, err == nil && again.id == sb.id, "ensureSandbox of a stopped persistent sandbox: %v, id %s want %s", err, again.id, sb.id)
	assert.NoError(t, NewTransport(cli, sb.id, "").checkRunning(ctx), "restarted sandbox")
}

func TestEnsureSandboxConcurrentCreate(t *testing.T) {
	cli := requireEngine(t)
	ctx := testContext(t)
	owner := "test-" + randomSuffix()
	tg := mustTarget(t, "docker-image://"+testImage)
	t.Cleanup(func() {
		_, _ = cli.ContainerRemove(testContext(t), tg.containerName(owner), client.ContainerRemoveOptions{Force: true})
	})

	ids := make([]string, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			sb, err := ensureSandbox(ctx, cli, tg, owner, discardLogger())
			errs[i] = err
			if err == nil {
				ids[i] = sb.id
			}
		})
	}
	wg.Wait()
	for i := range ids {
		if errs[i] != nil {
			require.FailNow(t, fmt.Sprintf("racing ensureSandbox %d: %v", i, errs[i]))
		}
		require.Truef(t, ids[i] == ids[0], "racing ensureSandbox calls made different containers: %v", ids)
	}
}

func TestEnsureSandboxRefusesForeignContainer(t *testing.T) {
	cli := requireEngine(t)
	name := startPlainContainer(t, cli)
	tg := mustTarget(t, "docker-image://"+testImage+"?name="+name)
	_, err := ensureSandbox(testContext(t), cli, tg, "me", discardLogger())
	require.Truef(t, err != nil && strings.Contains(err.Error(), "not a corral sandbox"), "name of a user's container: %v, want a refusal", err)
}

func TestEnsureSandboxMissingImage(t *testing.T) {
	cli := requireEngine(t)
	tg := mustTarget(t, "docker-image://corral-no-such-image-"+randomSuffix()+":latest")
	_, err := ensureSandbox(testContext(t), cli, tg, "me-"+randomSuffix(), discardLogger())
	require.Truef(t, err != nil && strings.Contains(err.Error(), "not found") && strings.Contains(err.Error(), "scripts/build-test-image.sh") && strings.Contains(err.Error(), "docker pull"), "missing image: %v, want one error naming the fix", err)
}

func TestReap(t *testing.T) {
	cli := requireEngine(t)
	ctx := testContext(t)
	owner := "test-reap-" + randomSuffix()
	mk := func(opts string) *sandbox {
		sb, err := ensureSandbox(ctx, cli, mustTarget(t, "docker-image://"+testImage+"?"+opts), owner, discardLogger())
		require.NoError(t, err)
		t.Cleanup(func() { _ = sb.remove(testContext(t)) })
		return sb
	}
	orphan := mk("pids=100")
	kept := mk("pids=101")
	persistent := mk("pids=102&persist=true")
	foreign := startPlainContainer(t, cli)
	otherOwner, err := ensureSandbox(ctx, cli, mustTarget(t, "docker-image://"+testImage), "test-other-"+randomSuffix(), discardLogger())
	require.NoError(t, err)
	t.Cleanup(func() { _ = otherOwner.remove(testContext(t)) })

	removed, err := reap(ctx, cli, ReapOptions{Owner: owner, Keep: []string{kept.name}, Logger: discardLogger()})
	require.NoError(t, err)
	assert.Truef(t, slices.Equal(removed, []string{orphan.name}), "reaped %v, want only %s", removed, orphan.name)
	exists := func(id string) bool {
		_, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		return !cerrdefs.IsNotFound(err)
	}
	if exists(orphan.id) || !exists(kept.id) || !exists(persistent.id) || !exists(foreign) || !exists(otherOwner.id) {
		assert.Fail(t, fmt.Sprintf("after reap: orphan %v kept %v persistent %v foreign %v other-owner %v", exists(orphan.id), exists(kept.id), exists(persistent.id), exists(foreign), exists(otherOwner.id)))
	}

	removed, err = reap(ctx, cli, ReapOptions{Owner: owner, IncludePersistent: true, Logger: discardLogger()})
	require.NoError(t, err)
	slices.Sort(removed)
	want := []string{kept.name, persistent.name}
	slices.Sort(want)
	assert.Truef(t, slices.Equal(removed, want), "reap with IncludePersistent removed %v, want %v", removed, want)
	assert.True(t, exists(foreign) && exists(otherOwner.id), "reap touched a container that is not this owner's sandbox")
}

// A sandbox whose container cannot start (here: its tmpfs is to be
// mounted on /tmp, which the image has as a file) leaves no container
// behind.
func TestEnsureSandboxStartFailureLeavesNothing(t *testing.T) {
	cli := requireEngine(t)
	ctx := testContext(t)
	image := "corral-test-badtmp-" + randomSuffix() + ":latest"
	var tarball bytes.Buffer
	tw := tar.NewWriter(&tarball)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "tmp", Mode: 0o644, Size: 2}))
	_, _ = tw.Write([]byte("x\n"))
	tw.Close()
	res, err := cli.ImageImport(ctx, client.ImageImportSource{Source: &tarball, SourceName: "-"}, image, client.ImageImportOptions{})
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res)
	res.Close()
	t.Cleanup(func() { _, _ = cli.ImageRemove(testContext(t), image, client.ImageRemoveOptions{Force: true}) })

	// A persistent sandbox is not AutoRemove: the engine leaves it.
	for _, query := range []string{"", "?persist=true"} {
		owner := "test-badtmp-" + randomSuffix()
		_, err = ensureSandbox(ctx, cli, mustTarget(t, "docker-image://"+image+query), owner, discardLogger())
		require.Truef(t, err != nil && strings.Contains(err.Error(), "start sandbox"), "sandbox%s that cannot mount its /tmp: %v, want a start error", query, err)
		left := sandboxesOf(t, cli, owner)
		assert.Truef(t, len(left) <= 0, "a failed start%s left containers behind: %v", query, left)
	}
}

// Close frees the sandbox's name at once: the same target opens a new
// sandbox straight away, while the engine deletes the old one, which
// WaitRemoved sees through.
func TestSandboxCloseThenReopen(t *testing.T) {
	cli := requireEngine(t)
	ctx := testContext(t)
	owner := "test-reopen-" + randomSuffix()
	target := "docker-image://" + testImage
	ids := make([]string, 3)
	for i := range ids {
		e, err := Open(ctx, target, Options{Owner: owner, Logger: discardLogger()})
		require.NoErrorf(t, err, "Open %d", i)
		res, err := cli.ContainerInspect(ctx, strings.TrimPrefix(e.Name(), SchemeContainer), client.ContainerInspectOptions{})
		require.NoError(t, err)
		ids[i] = res.Container.ID
		if _, err := e.Start(ctx, env.Spec{Command: "sleep 300", Detach: true}); err != nil {
			require.FailNow(t, fmt.Sprint(err))
		}
		require.NoErrorf(t, e.Close(), "Close %d", i)
	}
	assert.Truef(t, ids[0] != ids[1] && ids[1] != ids[2], "a closed sandbox was re-used: %v", ids)
	require.NoError(t, WaitRemoved(ctx))
	left := sandboxesOf(t, cli, owner)
	assert.Truef(t, len(left) <= 0, "after WaitRemoved: %v left", left)
}

// The engine deletes a closed sandbox even when the supervisor exits the
// moment Close returns, without WaitRemoved: nothing is leaked. The
// supervisor is this test binary, run again as a helper.
func TestSandboxGoneAfterCloseAndExit(t *testing.T) {
	if target := os.Getenv("CORRAL_TEST_SANDBOX_HELPER"); target != "" {
		sandboxHelper(target)
		return
	}
	cli := requireEngine(t)
	ctx := testContext(t)
	owner := "test-exit-" + randomSuffix()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSandboxGoneAfterCloseAndExit$")
	cmd.Env = append(os.Environ(), "CORRAL_TEST_SANDBOX_HELPER=docker-image://"+testImage, "CORRAL_TEST_SANDBOX_OWNER="+owner)
	out, err := cmd.Output()
	require.NoErrorf(t, err, "helper: %v\n%s", err, out)
	id := strings.TrimSpace(string(out))
	require.Truef(t, len(id) == 64, "helper printed %q, want a container ID", out)
	// The helper is gone; the engine finishes the job on its own.
	if err := waitGone(ctx, cli, id, time.Minute); err != nil {
		require.FailNow(t, fmt.Sprintf("sandbox %s after its supervisor closed it and exited: %v", shortID(id), err))
	}
	left := sandboxesOf(t, cli, owner)
	assert.Truef(t, len(left) <= 0, "containers of the helper left: %v", left)
}

// sandboxHelper opens target, runs a detached and a foreground process,
// closes the Environment, prints the container's ID and exits at once.
func sandboxHelper(target string) {
	ctx := context.Background()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	e, err := Open(ctx, target, Options{Owner: os.Getenv("CORRAL_TEST_SANDBOX_OWNER"), Logger: discardLogger()})
	if err != nil {
		fail(err)
	}
	cli, err := connect(ctx, "")
	if err != nil {
		fail(err)
	}
	res, err := cli.ContainerInspect(ctx, strings.TrimPrefix(e.Name(), SchemeContainer), client.ContainerInspectOptions{})
	if err != nil {
		fail(err)
	}
	if _, err := e.Start(ctx, env.Spec{Command: "sleep 300", Detach: true}); err != nil {
		fail(err)
	}
	p, err := e.Start(ctx, env.Spec{Command: "true"})
	if err != nil {
		fail(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		fail(err)
	}
	if err := e.Close(); err != nil {
		fail(err)
	}
	fmt.Println(res.Container.ID)
	os.Exit(0)
}

// sandboxesOf lists the names of owner's containers.
func sandboxesOf(t *testing.T, cli *client.Client, owner string) []string {
	t.Helper()
	list, err := cli.ContainerList(testContext(t), client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", LabelOwner+"="+owner)})
	require.NoError(t, err)
	var names []string
	for _, c := range list.Items {
		names = append(names, strings.Join(c.Names, ","))
	}
	return names
}
