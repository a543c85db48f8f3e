package integration

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env/ssh/sshtest"
	"github.com/corralhq/corral/registry"
)

// Sandboxes that vanish, and what is left behind (issue #28, items 4 and
// 5): a docker-image sandbox removed under its processes, a docker://NAME
// container replaced, two daemons on one image, and an SSH host whose
// connections are cut while spares are armed.

// chaosDoctorStatus returns the status word corral doctor gives the line
// called name ("open TARGET"): ok, connected, gone…; "" when it has none.
func chaosDoctorStatus(h *daemonHome, name string) string {
	h.t.Helper()
	var probes []struct {
		Name   string `json:"name"`
		OK     bool   `json:"ok"`
		Status string `json:"status"`
		Detail string `json:"detail"`
	}
	require.NoError(h.t, json.Unmarshal([]byte(h.mustRun("doctor", "--json")), &probes), "doctor --json")
	for _, p := range probes {
		if p.Name != name {
			continue
		}
		switch {
		case p.Status != "":
			return p.Status
		case p.OK:
			return "ok"
		}
		return "missing"
	}
	return ""
}

// sshSession matches the SSH_CONNECTION entry of srv's sessions.
func sshSession(srv *sshtest.Server) func(kv string) bool {
	suffix := " " + strconv.Itoa(srv.Port)
	return func(kv string) bool {
		return strings.HasPrefix(kv, "SSH_CONNECTION=") && strings.HasSuffix(kv, suffix)
	}
}

// TestChaosSandboxSSHReconnect cuts every connection of the daemon to an
// SSH host while armed spares wait there (sshd killed with its
// connections), tries a start during the outage, lets the daemon
// reconnect and start again, and then shuts it down with --kill-all:
// nothing of corral may be left running on the host. Each outage used to
// leave an armed spare (two corral-parent and a corral-command) that no
// Close and no kill ever reached.
func TestChaosSandboxSSHReconnect(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the corral daemon and sshd")
	}
	srv := sshtest.Start(t)
	mark := sshSession(srv)
	since := time.Now()
	h := newDaemonHome(t, buildCorral(t))
	h.trustSSH(srv)
	h.startServe()
	t.Cleanup(func() {
		// A failed run must not leave its processes behind either.
		for _, l := range chaosLeftoversWhere(since, mark) {
			pid, _, _ := strings.Cut(l, " ")
			if n, err := strconv.Atoi(pid); err == nil {
				syscall.Kill(n, syscall.SIGKILL)
			}
		}
	})

	target := srv.Target()
	start := func(what string) {
		t.Helper()
		chaosWithin(t, what, 30*time.Second, func() {
			h.mustRun("start", "--backend", target, "--label", "chaos=ssh", "--", "sleep 600")
		})
	}
	// Spares are armed from the second start on.
	for i := range 3 {
		start(fmt.Sprintf("start %d", i))
	}
	for round := range 2 {
		srv.Stop()
		// A start while the host is unreachable must fail within its
		// bound with a short error, or succeed once it is back; either
		// way it must leave no spare behind.
		r := h.run("start", "--backend", target, "--label", "chaos=ssh", "--", "sleep 600")
		t.Logf("start during the outage: exit %d %s", r.code, strings.TrimSpace(r.stderr))
		if r.code != 0 {
			chaosShortError(t, r.stderr)
		}
		srv.Restart(t)
		// Reconnecting backs off up to 10 s between dials: wait for it as
		// a person would, on doctor, rather than fail a start meanwhile.
		waitCond(t, "the daemon to reconnect", func() bool {
			return chaosDoctorStatus(h, "open "+target) == "connected"
		})
		start(fmt.Sprintf("start after reconnect %d", round))
		start(fmt.Sprintf("second start after reconnect %d", round))
	}
	chaosWithin(t, "shutdown --kill-all", 30*time.Second, func() {
		h.mustRun("shutdown", "--kill-all")
	})
	chaosNoLeftoversWhere(t, since, 15*time.Second, mark)
}

// chaosContainer is what a test needs to know of a container: its ID and
// the hostname its processes see (HOSTNAME in their environment, which
// tells them apart from other tests' processes on this machine).
type chaosContainer struct{ id, hostname string }

func inspectContainer(t *testing.T, cli *client.Client, name string) (chaosContainer, bool) {
	t.Helper()
	res, err := cli.ContainerInspect(dockerCtx(t), name, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return chaosContainer{}, false
	}
	require.NoErrorf(t, err, "inspect %s", name)
	c := chaosContainer{id: res.Container.ID}
	if res.Container.Config != nil {
		c.hostname = res.Container.Config.Hostname
	}
	return c, true
}

// inContainer matches the environment entry of processes run in c.
func inContainer(c chaosContainer) func(kv string) bool {
	return func(kv string) bool { return kv == "HOSTNAME="+c.hostname }
}

// startNamedContainer starts a container called name the way a user would
// (not a corral sandbox); it is removed when the test ends.
func startNamedContainer(t *testing.T, cli *client.Client, name string) chaosContainer {
	t.Helper()
	ctx := dockerCtx(t)
	init := true
	_, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: name,
		Config: &container.Config{
			Image:  dockerTestImage,
			Cmd:    []string{"/bin/sh", "-c", `trap "exit 0" TERM; while :; do sleep 3600 & wait; done`},
			Labels: map[string]string{"dev.corral.test": "true"},
		},
		HostConfig: &container.HostConfig{Init: &init, NetworkMode: "none"},
	})
	require.NoErrorf(t, err, "create container %s", name)
	t.Cleanup(func() { removeContainer(cli, name) })
	if _, err := cli.ContainerStart(ctx, name, client.ContainerStartOptions{}); err != nil {
		require.FailNow(t, fmt.Sprintf("start container %s: %v", name, err))
	}
	c, _ := inspectContainer(t, cli, name)
	return c
}

// sandboxStart starts command on target through h's daemon with label and
// returns the process's ID and the container it runs in (its Ref's
// environment, docker://NAME).
func sandboxStart(t *testing.T, h *daemonHome, target, label, command string) (id, box string) {
	t.Helper()
	chaosWithin(t, "start on "+target, 90*time.Second, func() {
		id = strings.TrimSpace(h.mustRun("start", "--backend", target, "--label", label, "--", command))
	})
	for _, in := range h.list(label) {
		if in.ID == id && in.Ref != nil {
			return id, strings.TrimPrefix(in.Ref.Env, "docker://")
		}
	}
	require.FailNow(t, fmt.Sprintf("%s: no ref in corral ps", id))
	return "", ""
}

// chaosInfo returns the process id as h's daemon lists it.
func chaosInfo(t *testing.T, h *daemonHome, id string) registry.Info {
	t.Helper()
	for _, in := range h.list("") {
		if in.ID == id {
			return in
		}
	}
	require.FailNow(t, fmt.Sprintf("%s is not listed", id))
	return registry.Info{}
}

// chaosWaitLost waits, within bound, until id is recorded lost, and checks
// that its reason is a short sentence that says the sandbox is gone.
func chaosWaitLost(t *testing.T, h *daemonHome, id string, bound time.Duration) {
	t.Helper()
	var in registry.Info
	chaosWithin(t, id+" recorded lost", bound, func() {
		waitCond(t, id+" lost", func() bool {
			in = chaosInfo(t, h, id)
			return in.State.Final()
		})
	})
	require.Truef(t, in.State == registry.StateLost, "%s is %s, want lost: %+v", id, in.State, in)
	chaosShortError(t, in.Reason)
	assert.Truef(t, strings.Contains(in.Reason, "gone") || strings.Contains(in.Reason, "removed"), "%s's reason does not say its sandbox is gone: %q", id, in.Reason)
}

// TestChaosSandboxRemoved removes a docker-image sandbox (docker rm -f)
// while a process runs in it: the process is recorded lost with the
// reason, doctor says the target is gone, the next run gets a fresh
// sandbox and works, doctor says ok again, and shutdown --kill-all leaves
// nothing running. Runs and starts on the target used to fail with
// "sandbox is gone" until the daemon restarted, doctor calling it ok.
func TestChaosSandboxRemoved(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the corral daemon and docker sandboxes")
	}
	cli := requireDocker(t)
	h := newDaemonHome(t, buildCorral(t))
	h.startServe()
	since := time.Now()
	target := "docker-image://" + dockerTestImage + "?network=none"
	id, box := sandboxStart(t, h, target, "chaos=removed", "sleep 600")
	t.Cleanup(func() { removeContainer(cli, box) })
	old, ok := inspectContainer(t, cli, box)
	require.Truef(t, ok, "sandbox %s not found", box)

	_, err := cli.ContainerRemove(dockerCtx(t), box, client.ContainerRemoveOptions{Force: true})
	require.NoErrorf(t, err, "docker rm -f %s", box)
	chaosWaitLost(t, h, id, 15*time.Second)
	if st := chaosDoctorStatus(h, "open "+target); st != "gone" {
		assert.Fail(t, fmt.Sprintf("doctor says %q for the removed sandbox, want gone", st))
	}

	var r cliResult
	chaosWithin(t, "run on a fresh sandbox", 60*time.Second, func() {
		r = h.run("run", "--backend", target, "--", "echo fresh")
	})
	require.Truef(t, r.code == 0 && r.stdout == "fresh\n", "run after the sandbox was removed: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	fresh, ok := inspectContainer(t, cli, box)
	require.Truef(t, ok && fresh.id != old.id, "run after removal: sandbox %s is %+v (found %v), want a new container", box, fresh, ok)
	st := chaosDoctorStatus(h, "open "+target)
	assert.Truef(t, st == "ok", "doctor says %q once the target was opened again, want ok", st)

	sandboxStart(t, h, target, "chaos=removed", "sleep 600")
	chaosWithin(t, "shutdown --kill-all", 30*time.Second, func() { h.mustRun("shutdown", "--kill-all") })
	waitCond(t, "the fresh sandbox to be removed", func() bool {
		_, ok := inspectContainer(t, cli, box)
		return !ok
	})
	chaosNoLeftoversWhere(t, since, 15*time.Second, inContainer(fresh))
}

// TestChaosSandboxContainerReplaced removes the container of a
// docker://NAME target under a running process and creates a new one
// under the same name: the process is lost with the reason, and the next
// run uses the new container. With no container of that name left, a run
// fails at once with one short sentence.
func TestChaosSandboxContainerReplaced(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the corral daemon and docker containers")
	}
	cli := requireDocker(t)
	name := uniqueName("corral-chaos-")
	startNamedContainer(t, cli, name)
	h := newDaemonHome(t, buildCorral(t))
	h.startServe()
	target := "docker://" + name
	id, _ := sandboxStart(t, h, target, "chaos=replaced", "sleep 600")

	removeContainer(cli, name)
	next := startNamedContainer(t, cli, name)
	chaosWaitLost(t, h, id, 15*time.Second)
	var r cliResult
	chaosWithin(t, "run in the new container", 30*time.Second, func() {
		r = h.run("run", "--backend", target, "--", "hostname")
	})
	require.Truef(t, r.code == 0 && strings.TrimSpace(r.stdout) == next.hostname, "run after the container was replaced: exit %d, stdout %q (want the new container's hostname %q), stderr %q", r.code, r.stdout, next.hostname, r.stderr)

	removeContainer(cli, name)
	chaosWithin(t, "run with no container of that name", 15*time.Second, func() {
		r = h.run("run", "--backend", target, "--", "true")
	})
	require.Truef(t, r.code != 0, "run with no container named %s succeeded: %+v", name, r)
	chaosShortError(t, r.stderr)
	assert.Truef(t, strings.Contains(r.stderr, "no container is named "+name), "run with no container named %s: %q does not say so", name, r.stderr)
}

// TestChaosSandboxTwoDaemons runs two daemons (two HOMEs, as a test
// harness beside a developer's daemon) on the same docker-image target:
// each gets a sandbox of its own, and one's shutdown --kill-all leaves the
// other's process running. They used to share one sandbox, and the first
// to shut down made the other's processes lost.
func TestChaosSandboxTwoDaemons(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two corral daemons and docker sandboxes")
	}
	cli := requireDocker(t)
	bin := buildCorral(t)
	a, b := newDaemonHome(t, bin), newDaemonHome(t, bin)
	a.startServe()
	b.startServe()
	target := "docker-image://" + dockerTestImage + "?network=none"
	_, boxA := sandboxStart(t, a, target, "chaos=a", "sleep 600")
	t.Cleanup(func() { removeContainer(cli, boxA) })
	idB, boxB := sandboxStart(t, b, target, "chaos=b", "sleep 600")
	t.Cleanup(func() { removeContainer(cli, boxB) })
	require.Truef(t, boxA != boxB, "two daemons share the sandbox %s", boxA)

	chaosWithin(t, "shutdown --kill-all of one daemon", 30*time.Second, func() { a.mustRun("shutdown", "--kill-all") })
	waitCond(t, "the first daemon's sandbox to be removed", func() bool {
		_, ok := inspectContainer(t, cli, boxA)
		return !ok
	})
	in := chaosInfo(t, b, idB)
	require.Truef(t, in.State == registry.StateRunning, "the other daemon's process is %s after the first one's shutdown --kill-all: %+v", in.State, in)
	r := b.run("run", "--backend", target, "--", "echo still")
	require.Truef(t, r.code == 0 && r.stdout == "still\n", "the other daemon's sandbox after the first one's shutdown: exit %d, %q, %q", r.code, r.stdout, r.stderr)
}
