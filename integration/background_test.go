package integration

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
	"github.com/corralhq/corral/env/ssh/sshtest"
	"github.com/corralhq/corral/registry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBackgroundLikeForeground drives issue 12's cases through the built
// corral binary and its daemon, on every backend: background commands get
// default signal dispositions, an INT trap runs, a tree that outlives its
// leader stays visible and killable (also across a daemon crash), kill
// results count the whole tree and say when SIGKILL followed, and a signal
// can be sent without escalation.
func TestBackgroundLikeForeground(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the corral binary, a docker sandbox and sshd")
	}
	sshtest.Require(t)
	dockerCli := requireDocker(t)
	srv := sshtest.Start(t)
	sandbox := fmt.Sprintf("corral-bg-test-%08x", rand.Uint32())
	t.Cleanup(func() { removeContainer(dockerCli, sandbox) })
	plugins := buildPlugins(t, "localplugin")

	h := newDaemonHome(t, buildCorral(t))
	h.env = slices.DeleteFunc(h.env, func(kv string) bool { return strings.HasPrefix(kv, "SSH_AUTH_SOCK=") })
	h.env = append(h.env, "CORRAL_PLUGIN_PATH="+plugins)
	dotSSH := filepath.Join(h.home, ".ssh")
	require.NoError(t, os.MkdirAll(dotSSH, 0o700))
	copyFile(t, srv.ClientKey, filepath.Join(dotSSH, "id_ed25519"), 0o600)
	copyFile(t, srv.KnownHosts, filepath.Join(dotSSH, "known_hosts"), 0o600)
	h.startServe()

	baseline := envtest.LocalSignalBaseline(t)
	for _, b := range []struct{ name, target string }{
		{"local", "local"},
		{"docker", "docker-image://" + dockerTestImage + "?network=none&name=" + sandbox},
		{"ssh", srv.Target()},
		{"plugin", "localplugin://?state=" + t.TempDir()},
	} {
		t.Run(b.name, func(t *testing.T) {
			bg := &bgBackend{h: h, target: b.target}
			t.Run("SignalDispositions", func(t *testing.T) { bg.signalDispositions(t, baseline) })
			t.Run("TrapINT", bg.trapINT)
			t.Run("Leftovers", bg.leftovers)
			t.Run("LeftoverOutput", bg.leftoverOutput)
			t.Run("KillAllAndRmForce", bg.killAllAndRmForce)
			t.Run("KillResultCountsTheTree", bg.killResult)
			t.Run("NoEscalate", bg.noEscalate)
		})
	}
	t.Run("LeftoversSurviveADaemonCrash", func(t *testing.T) {
		bg := &bgBackend{h: h, target: "local"}
		m := cliSleepMarker(t)
		id := bg.start(t, "sleep "+m+" & echo hi")
		require.Equal(t, 0, h.with(t).run("wait", id).code)
		bg.waitLeftover(t, id, 1)
		h.crashServe()
		h.startServe()
		bg.waitLeftover(t, id, 1)
		res := bg.kill(t, id)
		assert.True(t, res.AlreadyExited)
		assert.Equal(t, 1, res.Ended)
		cliRequireMarkerGone(t, m)
		require.Equal(t, 0, h.with(t).run("wait", "--tree", id).code)
	})
}

type bgBackend struct {
	h      *daemonHome
	target string
}

func (b *bgBackend) start(t *testing.T, command string, flags ...string) string {
	t.Helper()
	args := append([]string{"start", "--backend", b.target}, flags...)
	id := strings.TrimSpace(b.h.with(t).mustRun(append(args, "--", command)...))
	require.True(t, registry.ValidID(id), "start printed %q", id)
	return id
}

func (b *bgBackend) info(t *testing.T, id string) registry.Info {
	t.Helper()
	var in registry.Info
	for _, x := range b.h.with(t).list("") {
		if x.ID == id {
			in = x
		}
	}
	require.Equal(t, id, in.ID, "ps -a does not list %s", id)
	return in
}

func (b *bgBackend) logs(t *testing.T, id string) string {
	t.Helper()
	return b.h.with(t).mustRun("logs", id)
}

func (b *bgBackend) waitLogs(t *testing.T, id, want string) {
	t.Helper()
	waitCond(t, fmt.Sprintf("%q in the output of %s", want, id), func() bool { return strings.Contains(b.logs(t, id), want) })
}

func (b *bgBackend) kill(t *testing.T, id string, flags ...string) registry.KillResult {
	t.Helper()
	var res []registry.KillResult
	out := b.h.with(t).mustRun(append(append([]string{"kill", "--json"}, flags...), id)...)
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Len(t, res, 1)
	return res[0]
}

func (b *bgBackend) waitLeftover(t *testing.T, id string, n int) {
	t.Helper()
	waitCond(t, fmt.Sprintf("%s listed with %d left running", id, n), func() bool {
		ps := b.h.with(t).mustRun("ps")
		return strings.Contains(ps, id) && strings.Contains(ps, fmt.Sprintf("exited (0), %d left running", n))
	})
}

// signalDispositions: nothing ignored or blocked that a plain sh -c of
// the test lacks, and yes | head ends without "Broken pipe".
func (b *bgBackend) signalDispositions(t *testing.T, baseline envtest.SignalMasks) {
	id := b.start(t, `exec grep -E '^Sig(Ign|Blk):' /proc/self/status`)
	require.Equal(t, 0, b.h.with(t).run("wait", id).code)
	got, err := envtest.ParseSignalMasks(b.logs(t, id))
	require.NoError(t, err)
	assert.Zero(t, got.Ignored&^baseline.Ignored, "ignored signals beyond a plain sh -c: %016x", got.Ignored)
	assert.Zero(t, got.Blocked&^baseline.Blocked, "blocked signals beyond a plain sh -c: %016x", got.Blocked)

	id = b.start(t, "yes | head -n 1")
	require.Equal(t, 0, b.h.with(t).run("wait", id).code)
	assert.Equal(t, "y\n", b.logs(t, id), "yes must end by SIGPIPE, quietly")
}

// trapINT: corral kill -s INT runs the command's trap, whose exit is the
// status, and nothing escalates.
func (b *bgBackend) trapINT(t *testing.T) {
	m := cliSleepMarker(t)
	id := b.start(t, `trap 'echo trapped; exit 7' INT; echo ready; while :; do sleep `+m+`; done`)
	b.waitLogs(t, id, "ready\n")
	cliRequireMarkerRunning(t, m, 1)
	res := b.kill(t, id, "-s", "INT", "--grace", "30s")
	assert.False(t, res.Escalated, "%+v", res)
	assert.Equal(t, env.SIGINT, res.Signal)
	require.NotNil(t, res.Status)
	assert.Equal(t, env.Exited(7), *res.Status)
	assert.Equal(t, registry.StateKilled, res.State)
	assert.Equal(t, "ready\ntrapped\n", b.logs(t, id))
}

// leftovers: `sleep & echo` exits 0 at once and leaves the sleep; the
// process stays visible and killable, rm refuses it, wait --tree waits.
func (b *bgBackend) leftovers(t *testing.T) {
	m := cliSleepMarker(t)
	id := b.start(t, "sleep "+m+" & echo hi")
	require.Equal(t, 0, b.h.with(t).run("wait", id).code, "wait returns with the leader's exit")
	b.waitLeftover(t, id, 1)
	cliRequireMarkerRunning(t, m, 1)

	r := b.h.with(t).run("rm", id)
	assert.NotEqual(t, 0, r.code)
	assert.Contains(t, r.stderr, "still run")
	assert.Contains(t, r.stderr, "corral kill "+id)
	r = b.h.with(t).run("wait", "--tree", "--timeout", "200ms", id)
	assert.Equal(t, 124, r.code, "wait --tree must wait for the sleep: %+v", r)

	res := b.kill(t, id)
	assert.True(t, res.AlreadyExited)
	assert.Equal(t, 1, res.Ended, "%+v", res)
	require.NotNil(t, res.Status)
	assert.Equal(t, env.Exited(0), *res.Status)
	cliRequireMarkerGone(t, m)
	require.Equal(t, 0, b.h.with(t).run("wait", "--tree", id).code)
	assert.NotContains(t, b.h.with(t).mustRun("ps"), id, "nothing of it runs any more")
	b.h.with(t).mustRun("rm", id)
}

// leftoverOutput: what a leftover writes after the leader exited reaches
// the process's log.
func (b *bgBackend) leftoverOutput(t *testing.T) {
	gate := fmt.Sprintf("/tmp/corral-bg-gate-%08x", rand.Uint32())
	id := b.start(t, `(while [ ! -e `+gate+` ]; do sleep 0.02; done; rm -f `+gate+`; echo late) & echo early`)
	require.Equal(t, 0, b.h.with(t).run("wait", id).code)
	toucher := b.start(t, "touch "+gate)
	require.Equal(t, 0, b.h.with(t).run("wait", toucher).code)
	require.Equal(t, 0, b.h.with(t).run("wait", "--tree", id).code)
	assert.Equal(t, "early\nlate\n", b.logs(t, id))
}

func (b *bgBackend) killAllAndRmForce(t *testing.T) {
	label := fmt.Sprintf("bg=%08x", rand.Uint32())
	m1, m2, m3 := cliSleepMarker(t), cliSleepMarker(t), cliSleepMarker(t)
	a := b.start(t, "sleep "+m1+" & echo a", "--label", label)
	c := b.start(t, "sleep "+m2+" & echo c", "--label", label)
	for _, id := range []string{a, c} {
		require.Equal(t, 0, b.h.with(t).run("wait", id).code)
		b.waitLeftover(t, id, 1)
	}
	var res []registry.KillResult
	out := b.h.with(t).mustRun("kill", "--all", "--label", label, "--json")
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	ended := map[string]int{}
	for _, r := range res {
		ended[r.ID] = r.Ended
	}
	assert.Equal(t, map[string]int{a: 1, c: 1}, ended, "kill --all includes processes whose leader exited")
	cliRequireMarkerGone(t, m1)
	cliRequireMarkerGone(t, m2)

	d := b.start(t, "sleep "+m3+" & echo d")
	require.Equal(t, 0, b.h.with(t).run("wait", d).code)
	b.waitLeftover(t, d, 1)
	b.h.with(t).mustRun("rm", "--force", d)
	cliRequireMarkerGone(t, m3)
	assert.NotContains(t, b.h.with(t).mustRun("ps", "-a"), d)
}

// killResult: the outer shell dies of TERM, the inner one and its sleep
// ignore it; SIGKILL after the grace is an escalation, and every process
// is counted.
func (b *bgBackend) killResult(t *testing.T) {
	m := cliSleepMarker(t)
	id := b.start(t, `sh -c 'trap "" TERM; sleep `+m+`; :'; :`)
	cliRequireMarkerRunning(t, m, 1)
	res := b.kill(t, id, "--grace", "1s")
	assert.Equal(t, env.SIGTERM, res.Signal)
	assert.True(t, res.Escalated, "%+v", res)
	assert.Equal(t, 3, res.Ended, "outer sh, inner sh, sleep: %+v", res)
	assert.Empty(t, res.Survivors)
	cliRequireMarkerGone(t, m)
	line := b.h.with(t).mustRun("kill", id)
	assert.Contains(t, line, "already exited")
}

// noEscalate: HUP reloads a server and returns; nothing is killed.
func (b *bgBackend) noEscalate(t *testing.T) {
	if signal.Ignored(syscall.SIGHUP) {
		t.Skip("SIGHUP is ignored by this test's parent (run under nohup?), and the daemon's commands inherit that: a shell cannot trap it")
	}
	id := b.start(t, `trap 'echo reloaded' HUP; echo ready; while :; do sleep 0.05; done`)
	b.waitLogs(t, id, "ready\n")
	res := b.kill(t, id, "-s", "HUP", "--no-escalate", "--grace", "300ms")
	assert.True(t, res.StillRunning, "%+v", res)
	assert.False(t, res.Escalated)
	b.waitLogs(t, id, "reloaded\n")
	assert.Equal(t, registry.StateRunning, b.info(t, id).State)
	r := b.h.with(t).run("kill", "--force", "--no-escalate", id)
	assert.Equal(t, 2, r.code, "contradictory flags are a usage error: %+v", r)
	res = b.kill(t, id, "--force")
	assert.Equal(t, registry.StateKilled, res.State)
}
