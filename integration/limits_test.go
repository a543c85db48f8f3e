package integration

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
	"github.com/corralhq/corral/registry"
)

// TestLimitsRefusedThroughTheCLI: a limit the backend cannot enforce is
// refused before anything runs, with the backend's reason, a non-zero
// exit and the command never started: a limit accepted and not enforced
// would let a runaway through.
func TestLimitsRefusedThroughTheCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the corral binary")
	}
	bin := buildCorral(t)
	backend := "docker://" + startUserContainer(t, requireDocker(t))
	h := newDaemonHome(t, bin)
	for _, args := range [][]string{
		{"run", "--backend", backend, "--memory", "100M", "--", "true"},
		{"start", "--backend", backend, "--memory", "100M", "--", "sleep 600"},
	} {
		r := h.run(args...)
		assert.NotEqual(t, 0, r.code, "corral %q: stdout %q", args, r.stdout)
		// One line says it (the first command also says it started
		// the daemon), naming the command, the backend and the flag.
		var said []string
		for _, line := range strings.Split(r.stderr, "\n") {
			if strings.Contains(line, "cannot enforce") {
				said = append(said, line)
			}
		}
		if assert.Len(t, said, 1, "corral %q: %q", args, r.stderr) {
			assert.Contains(t, said[0], "corral: "+args[0]+": ")
			assert.Contains(t, said[0], backend+" cannot enforce --memory: ")
			assert.NotContains(t, said[0], "start: start:", "the operation said once")
		}
		assert.NotContains(t, r.stderr, "500", "not an internal error: %q", r.stderr)
	}
	var list []registry.Info
	require.NoError(t, json.Unmarshal([]byte(h.mustRun("ps", "--all", "--json")), &list))
	assert.Empty(t, list, "nothing registered")
}

// TestLimitsThroughTheCLI: on the local backend, a command over its
// memory limit is ended by the OOM killer (exit 137) and corral says so,
// naming the limit; a process started beside it, without a limit, runs
// on. Skipped while the local backend enforces no memory limit (no
// cgroup v2 delegation here), unless CORRAL_REQUIRE_LIMITS=1.
func TestLimitsThroughTheCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the corral binary")
	}
	requireLocalLimit(t, env.LimitMemory)
	bin := buildCorral(t)
	h := newDaemonHome(t, bin)

	sibling := strings.TrimSpace(h.mustRun("start", "--", "sleep 600"))
	// 300 MB in a shell variable: far over 100M, so the kernel ends the
	// tree; "survived" would say the limit did not hold.
	r := h.run("run", "--memory", "100M", "--", "sh", "-c", `x=$(head -c 300000000 /dev/zero | tr "\0" a); echo survived`)
	assert.Equal(t, 137, r.code, "stdout %q stderr %q", r.stdout, r.stderr)
	assert.NotContains(t, r.stdout, "survived")
	assert.Contains(t, r.stderr, "out of memory (limit 100M)")

	in := psInfo(t, h, sibling)
	assert.Equal(t, registry.StateRunning, in.State, "the sibling outlived the OOM kill: %+v", in)
	assert.Nil(t, in.Limits)
	h.mustRun("kill", "--force", sibling)
}

// requireLocalLimit skips the test, saying why, when the local backend of
// this machine does not enforce the limit name; with
// CORRAL_REQUIRE_LIMITS=1 it fails instead.
func requireLocalLimit(t *testing.T, name string) {
	t.Helper()
	e, err := local.New(local.Options{StateDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	caps := e.Capabilities()
	require.NoError(t, e.Close())
	if slices.Contains(caps.Limits, name) {
		return
	}
	why := caps.LimitsNote
	if why == "" {
		why = "it enforces no per-process limit"
	}
	if os.Getenv("CORRAL_REQUIRE_LIMITS") == "1" {
		require.FailNowf(t, "limits required", "CORRAL_REQUIRE_LIMITS=1 but the local backend does not enforce --%s: %s", name, why)
	}
	t.Skipf("the local backend does not enforce --%s here (set CORRAL_REQUIRE_LIMITS=1 to fail instead): %s", name, why)
}

// psInfo is the process id as corral ps --all --json lists it.
func psInfo(t *testing.T, h *daemonHome, id string) registry.Info {
	t.Helper()
	var list []registry.Info
	out := h.mustRun("ps", "--all", "--json")
	require.NoError(t, json.Unmarshal([]byte(out), &list), "corral ps --json: %s", out)
	for _, in := range list {
		if in.ID == id {
			return in
		}
	}
	require.FailNowf(t, "not listed", "%s is not in corral ps --all: %s", id, out)
	return registry.Info{}
}

// TestCeilingThroughServe: `corral serve --max-memory 100M` holds the local
// processes together under 100M: of ten that each hold 40 MB, the OOM
// killer ends most, and corral says so; a ceiling below what anything
// needs is refused before the daemon runs.
func TestCeilingThroughServe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the corral binary")
	}
	requireLocalLimit(t, env.LimitMemory)
	bin := buildCorral(t)
	h := newDaemonHome(t, bin)

	r := h.run("serve", "--max-memory", "1M")
	assert.Equal(t, 2, r.code, "stderr %q", r.stderr)
	assert.Contains(t, r.stderr, "--max-memory")

	ceilings := func() []string {
		found, _ := filepath.Glob("/sys/fs/cgroup/*/corral/ceiling-*")
		more, _ := filepath.Glob("/sys/fs/cgroup/memory/*/*/corral/ceiling-*")
		return append(found, more...)
	}
	before := ceilings()
	h.startServe("--max-memory", "100M", "--max-pids", "500")
	t.Cleanup(func() {
		// The daemon removes the ceiling's cgroups as it ends: let it end,
		// rather than be killed by the harness once its socket is gone.
		h.mustRun("shutdown", "--kill-all")
		done := make(chan struct{})
		go func() { _ = h.serve.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = h.serve.Process.Kill()
			<-done
		}
		h.serve = nil
		for _, c := range ceilings() {
			assert.Contains(t, before, c, "the daemon's ceiling cgroup outlived it")
		}
	})
	var ids []string
	for range 10 {
		ids = append(ids, strings.TrimSpace(h.mustRun("start", "--", `v=$(head -c 40000000 /dev/zero | tr '\0' a); echo "held ${#v}"; sleep 2`)))
	}
	oom := 0
	for _, id := range ids {
		h.run("wait", id)
		if in := psInfo(t, h, id); registry.IsOutOfMemory(in.Reason) {
			oom++
		}
	}
	assert.GreaterOrEqual(t, oom, 7, "at most 2 processes of 40 MB fit under a 100M ceiling")
}
