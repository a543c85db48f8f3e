package docker

import (
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// mustTarget parses a target or fails the test.
func mustTarget(t *testing.T, s string) Target {
	t.Helper()
	tg, err := ParseTarget(s)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func TestEnsureSandboxCreatesHardenedContainer(t *testing.T) {
	cli := requireEngine(t)
	ctx := testContext(t)
	owner := "test-" + randomSuffix()
	tg := mustTarget(t, "docker-image://"+testImage+"?network=none&pids=200")

	sb, err := ensureSandbox(ctx, cli, tg, owner, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.remove(testContext(t)) })
	if sb.name != tg.containerName(owner) {
		t.Errorf("sandbox name %q, want the derived %q", sb.name, tg.containerName(owner))
	}
	res, err := cli.ContainerInspect(ctx, sb.id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := res.Container
	if !c.State.Running {
		t.Fatalf("sandbox not running: %+v", c.State)
	}
	hc := c.HostConfig
	if hc.Init == nil || !*hc.Init || !slices.Contains(hc.SecurityOpt, "no-new-privileges:true") ||
		hc.PidsLimit == nil || *hc.PidsLimit != 200 || hc.NetworkMode != "none" || len(hc.CapAdd) != len(Capabilities) {
		t.Errorf("engine-side host config not hardened: init %v secopt %v pids %v net %q capadd %v",
			hc.Init, hc.SecurityOpt, hc.PidsLimit, hc.NetworkMode, hc.CapAdd)
	}
	if c.Config.Labels[LabelOwner] != owner || c.Config.Labels[LabelManaged] != "true" {
		t.Errorf("labels %v", c.Config.Labels)
	}

	// Found again, not duplicated — also after it was stopped (a host
	// reboot, a `docker stop`): then it is started again.
	again, err := ensureSandbox(ctx, cli, tg, owner, discardLogger())
	if err != nil || again.id != sb.id {
		t.Fatalf("second ensureSandbox: %v, id %s want %s", err, again.id, sb.id)
	}
	timeout := 1
	if _, err := cli.ContainerStop(ctx, sb.id, client.ContainerStopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	again, err = ensureSandbox(ctx, cli, tg, owner, discardLogger())
	if err != nil || again.id != sb.id {
		t.Fatalf("ensureSandbox of a stopped sandbox: %v, id %s want %s", err, again.id, sb.id)
	}
	if err := NewTransport(cli, sb.id, "").checkRunning(ctx); err != nil {
		t.Errorf("restarted sandbox: %v", err)
	}

	// The same name with other options, or for another owner, is refused
	// with the fix.
	other := mustTarget(t, "docker-image://"+testImage+"?network=none&pids=300&name="+sb.name)
	if _, err := ensureSandbox(ctx, cli, other, owner, discardLogger()); err == nil || !strings.Contains(err.Error(), "docker rm -f "+sb.name) {
		t.Errorf("same name, other options: %v", err)
	}
	same := mustTarget(t, "docker-image://"+testImage+"?network=none&pids=200&name="+sb.name)
	if _, err := ensureSandbox(ctx, cli, same, "someone-else", discardLogger()); err == nil || !strings.Contains(err.Error(), "belongs to") {
		t.Errorf("same name, other owner: %v", err)
	}
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
			t.Fatalf("racing ensureSandbox %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("racing ensureSandbox calls made different containers: %v", ids)
		}
	}
}

func TestEnsureSandboxRefusesForeignContainer(t *testing.T) {
	cli := requireEngine(t)
	name := startPlainContainer(t, cli)
	tg := mustTarget(t, "docker-image://"+testImage+"?name="+name)
	_, err := ensureSandbox(testContext(t), cli, tg, "me", discardLogger())
	if err == nil || !strings.Contains(err.Error(), "not a corral sandbox") {
		t.Fatalf("name of a user's container: %v, want a refusal", err)
	}
}

func TestEnsureSandboxMissingImage(t *testing.T) {
	cli := requireEngine(t)
	tg := mustTarget(t, "docker-image://corral-no-such-image-"+randomSuffix()+":latest")
	_, err := ensureSandbox(testContext(t), cli, tg, "me-"+randomSuffix(), discardLogger())
	if err == nil || !strings.Contains(err.Error(), "not found") || !strings.Contains(err.Error(), "scripts/build-test-image.sh") ||
		!strings.Contains(err.Error(), "docker pull") {
		t.Fatalf("missing image: %v, want one error naming the fix", err)
	}
}

func TestReap(t *testing.T) {
	cli := requireEngine(t)
	ctx := testContext(t)
	owner := "test-reap-" + randomSuffix()
	mk := func(opts string) *sandbox {
		sb, err := ensureSandbox(ctx, cli, mustTarget(t, "docker-image://"+testImage+"?"+opts), owner, discardLogger())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sb.remove(testContext(t)) })
		return sb
	}
	orphan := mk("pids=100")
	kept := mk("pids=101")
	persistent := mk("pids=102&persist=true")
	foreign := startPlainContainer(t, cli)
	otherOwner, err := ensureSandbox(ctx, cli, mustTarget(t, "docker-image://"+testImage), "test-other-"+randomSuffix(), discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = otherOwner.remove(testContext(t)) })

	removed, err := reap(ctx, cli, ReapOptions{Owner: owner, Keep: []string{kept.name}, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{orphan.name}) {
		t.Errorf("reaped %v, want only %s", removed, orphan.name)
	}
	exists := func(id string) bool {
		_, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		return !cerrdefs.IsNotFound(err)
	}
	if exists(orphan.id) || !exists(kept.id) || !exists(persistent.id) || !exists(foreign) || !exists(otherOwner.id) {
		t.Errorf("after reap: orphan %v kept %v persistent %v foreign %v other-owner %v",
			exists(orphan.id), exists(kept.id), exists(persistent.id), exists(foreign), exists(otherOwner.id))
	}

	removed, err = reap(ctx, cli, ReapOptions{Owner: owner, IncludePersistent: true, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	want := []string{kept.name, persistent.name}
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Errorf("reap with IncludePersistent removed %v, want %v", removed, want)
	}
	if !exists(foreign) || !exists(otherOwner.id) {
		t.Error("reap touched a container that is not this owner's sandbox")
	}
}
