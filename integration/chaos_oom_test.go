//go:build linux

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/testing/memcgtest"
	"github.com/corralhq/corral/registry"
)

// The fault: the kernel's OOM killer ends a process, in a docker-image://
// sandbox with memory=64m and locally in a memory cgroup the test makes.
// corral must name it — state exited, status SIGKILL (or the 137 of the
// command's shell) with oom_killed, reason "out of memory", an oom_killed
// event, and run/wait saying so in one short sentence with what to do —
// and must not call a plain kill -9 of a process of the same cgroup an
// OOM kill.

// Bounds of the calls (the promise, not a speed target): a start that
// creates a sandbox, a wait for a hog that fills 64 MiB in well under a
// second, and a listing.
const (
	oomStartBound = 30 * time.Second
	oomWaitBound  = 30 * time.Second
	oomListBound  = 5 * time.Second
)

// TestChaosOOMDocker: a memory hog in a docker-image:// sandbox limited to
// 64 MiB, through a real daemon.
func TestChaosOOMDocker(t *testing.T) {
	cli := requireDocker(t)
	bin := buildCorral(t)
	since := time.Now()
	marker := oomMarker()
	sandbox := uniqueName("corral-chaos-oom-")
	h := newDaemonHome(t, bin)
	h.startServe()
	backend := "docker-image://" + dockerTestImage + "?memory=64m&name=" + sandbox

	hog := oomStart(t, h, backend, marker, "tail /dev/zero")
	chaosCheckOOM(t, h, hog, "out of memory (sandbox limit 64M)")

	// A process started after that OOM kill, in the same container, and
	// ended by kill -9 from outside corral: no OOM kill.
	sleeper := oomStart(t, h, backend, marker, "exec sleep "+marker)
	in := chaosGet(t, h, sleeper)
	require.Positive(t, in.PID)
	chaosWithin(t, "corral run kill -9 in the sandbox", oomStartBound, func() {
		h.mustRun("run", "--backend", backend, "--", "kill -9 "+strconv.Itoa(in.PID))
	})
	chaosCheckPlainKill(t, h, sleeper)

	h.mustRun("shutdown", "--kill-all")
	h.serve.Wait()
	h.serve = nil
	// The sandbox goes with the daemon that made it.
	waitCond(t, "sandbox "+sandbox+" removed", func() bool {
		_, err := cli.ContainerInspect(context.Background(), sandbox, client.ContainerInspectOptions{})
		return err != nil
	})
	chaosNoLeftoversWhere(t, since, 10*time.Second, homeScope(h), marker)
}

// TestChaosOOMLocal: a memory hog on the local backend, whose daemon runs
// in a memory cgroup the test makes (as a service with a memory limit
// would); its commands inherit the cgroup.
func TestChaosOOMLocal(t *testing.T) {
	cg := memcgtest.New(t, 256<<20) // first: removed after the daemon is gone
	bin := buildCorral(t)
	since := time.Now()
	marker := oomMarker()
	h := newDaemonHome(t, bin)
	startServeIn(t, h, cg)

	hog := oomStart(t, h, "local", marker, "tail /dev/zero")
	chaosCheckOOM(t, h, hog, "out of memory")

	sleeper := oomStart(t, h, "local", marker, "exec sleep "+marker)
	in := chaosGet(t, h, sleeper)
	require.Positive(t, in.PID)
	require.NoError(t, syscall.Kill(in.PID, syscall.SIGKILL))
	chaosCheckPlainKill(t, h, sleeper)

	n, err := cg.OOMKills()
	require.NoError(t, err)
	assert.Equal(t, uint64(1), n, "the kernel counted one OOM kill in the test's cgroup")

	h.mustRun("shutdown", "--kill-all")
	h.serve.Wait()
	h.serve = nil
	chaosNoLeftoversWhere(t, since, 10*time.Second, homeScope(h), marker)
}

// oomMarker is a sleep duration unique to the test (dash, bash and
// busybox sleep take fractions), which finds the test's sleeper in the
// process table, and labels its processes.
func oomMarker() string { return fmt.Sprintf("600.%07d", rand.IntN(10_000_000)) }

// startServeIn runs `corral serve` of h inside cg, as a child of the test,
// and waits until it answers.
func startServeIn(t *testing.T, h *daemonHome, cg *memcgtest.Cgroup) {
	t.Helper()
	cmd := cg.Command(h.bin, "serve", "--log-level", "info")
	cmd.Env = h.env
	logf, err := os.OpenFile(filepath.Join(h.home, "serve.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	require.NoError(t, err)
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(t, cmd.Start())
	h.serve = cmd
	c := daemon.NewClient(h.socket)
	defer c.CloseIdle()
	waitCond(t, "corral serve in the memory cgroup answers", func() bool {
		st, err := c.Status(context.Background())
		return err == nil && st.PID == cmd.Process.Pid
	})
}

// oomStart starts command on backend, labelled with marker, and returns
// its ID.
func oomStart(t *testing.T, h *daemonHome, backend, marker, command string) string {
	t.Helper()
	var id string
	chaosWithin(t, "corral start "+command, oomStartBound, func() {
		id = strings.TrimSpace(h.mustRun("start", "--backend", backend, "--label", "chaos-oom="+marker, "--", command))
	})
	require.True(t, registry.ValidID(id), "start printed %q", id)
	return id
}

// chaosGet is `corral ps -a --json` for one process, within its bound.
func chaosGet(t *testing.T, h *daemonHome, id string) registry.Info {
	t.Helper()
	var list []registry.Info
	chaosWithin(t, "corral ps -a --json", oomListBound, func() {
		require.NoError(t, json.Unmarshal([]byte(h.mustRun("ps", "-a", "--json")), &list))
	})
	for _, in := range list {
		if in.ID == id {
			return in
		}
	}
	require.FailNow(t, fmt.Sprintf("ps -a does not list %s", id))
	return registry.Info{}
}

// chaosCheckOOM waits for id and checks that everything names the OOM
// kill: reason is the Info.Reason expected (with the limit that ran out,
// where corral knows it).
func chaosCheckOOM(t *testing.T, h *daemonHome, id, reason string) {
	t.Helper()
	var r cliResult
	chaosWithin(t, "corral wait for the hog", oomWaitBound, func() { r = h.run("wait", id) })
	assert.Equal(t, 137, r.code, "wait's exit code, as a shell reports a SIGKILL: %s", r.stderr)
	assert.Contains(t, r.stderr, "ran "+reason)
	assert.Contains(t, r.stderr, "raise its memory limit")
	chaosShortError(t, r.stderr)

	in := chaosGet(t, h, id)
	assert.Equal(t, registry.StateExited, in.State)
	assert.Equal(t, reason, in.Reason)
	if assert.NotNil(t, in.Status) {
		assert.True(t, in.Status.OOMKilled, "status %+v", *in.Status)
		assert.Equal(t, 137, in.Status.ShellCode())
	}
	assert.False(t, in.TreeRunning, "nothing of the hog runs on")
	ps := h.mustRun("ps", "-a")
	assert.Regexp(t, id+`\s.*exited \((SIGKILL|137), out of memory\)`, ps)

	var evs []registry.Event
	chaosWithin(t, "corral events --json", oomListBound, func() {
		require.NoError(t, json.Unmarshal([]byte(h.mustRun("events", "--json")), &evs))
	})
	var oom *registry.Event
	for i, ev := range evs {
		if ev.ID == id && ev.Type == registry.EventOOMKilled {
			oom = &evs[i]
		}
	}
	if assert.NotNil(t, oom, "an oom_killed event for %s in %+v", id, evs) {
		assert.Contains(t, oom.Summary, "ran out of memory")
		if assert.NotNil(t, oom.Status) {
			assert.True(t, oom.Status.OOMKilled)
		}
	}
}

// chaosCheckPlainKill waits for id, ended by a kill -9 from outside
// corral, and checks that nothing calls it an OOM kill.
func chaosCheckPlainKill(t *testing.T, h *daemonHome, id string) {
	t.Helper()
	var r cliResult
	chaosWithin(t, "corral wait for the killed sleeper", oomWaitBound, func() { r = h.run("wait", id) })
	assert.Equal(t, 137, r.code)
	assert.NotContains(t, r.stderr, "memory")
	in := chaosGet(t, h, id)
	assert.Equal(t, registry.StateExited, in.State)
	assert.Empty(t, in.Reason)
	assert.Equal(t, &env.ExitStatus{Code: -1, Signal: env.SIGKILL}, in.Status)
	var evs []registry.Event
	require.NoError(t, json.Unmarshal([]byte(h.mustRun("events", "--json")), &evs))
	for _, ev := range evs {
		assert.False(t, ev.ID == id && ev.Type == registry.EventOOMKilled, "an oom_killed event for a plain kill -9: %+v", ev)
	}
}
