package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env/ssh/sshtest"
	"github.com/corralhq/corral/registry"
)

// crashBackend is one backend of TestDaemonCrashRecoveryBackends: where its
// processes run, how a test releases one of them (its flag) and how it sees
// that one has ended while no daemon watches (the exit file of env/nohup
// and env/local, inside the sandbox).
type crashBackend struct {
	name   string
	target string
	count  int // processes per round
	// flagCheck is the shell test a process loops on; release makes it true.
	flagCheck func(round, k int) string
	release   func(t *testing.T, round, k int)
	// exited reports whether every one of dirs (process state directories,
	// from the Ref) holds an exit file.
	exited func(t *testing.T, dirs []string) bool
}

// stateDirPattern is what a process state directory from a Ref may look
// like before it is put into a docker exec command line.
var stateDirPattern = regexp.MustCompile(`^/[A-Za-z0-9._/-]+$`)

// TestDaemonCrashRecoveryBackends is TestDaemonCrashRecovery across the
// local, docker-image and ssh backends at once: processes on all three,
// the daemon killed with SIGKILL, half of them ending while it is down,
// then a new daemon must list each with the right state, exit status and
// its whole output, without gap or duplicate. A docker-image sandbox
// outlives the killed daemon and must be found again by name; an ssh host
// must be reconnected with only what the daemon's HOME holds (~/.ssh).
func TestDaemonCrashRecoveryBackends(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the corral binary, a docker sandbox and sshd")
	}
	sshtest.Require(t) // skips, or fails under CORRAL_REQUIRE_SSH=1
	dockerCli := requireDocker(t)
	// Started before the daemon home so that their cleanups run after the
	// daemon's shutdown, which kills what is left on them.
	srv := sshtest.Start(t)
	sandbox := fmt.Sprintf("corral-crash-test-%08x", rand.Uint32())
	t.Cleanup(func() { removeContainer(dockerCli, sandbox) })

	h := newDaemonHome(t, buildCorral(t))
	h.trustSSH(srv)

	// Local and ssh processes run on this machine: their flags are files
	// here. A process also ends when the flag directory is gone, so that a
	// failed run leaves nothing looping after the test.
	flags := t.TempDir()
	hostFlag := func(round, k int) string {
		return filepath.Join(flags, fmt.Sprintf("%d-%d", round, k))
	}
	hostCheck := func(round, k int) string {
		return fmt.Sprintf("[ -e %s ] || ! [ -d %s ]", hostFlag(round, k), flags)
	}
	hostRelease := func(t *testing.T, round, k int) {
		require.NoError(t, os.WriteFile(hostFlag(round, k), nil, 0o600))
	}
	hostExited := func(t *testing.T, dirs []string) bool {
		for _, d := range dirs {
			if !exitRecorded(d) {
				return false
			}
		}
		return true
	}
	// Docker processes see only the sandbox's file system.
	sandboxFlag := func(round, k int) string { return fmt.Sprintf("/tmp/flag-%d-%d", round, k) }
	// A few processes a backend, each of them both ending while no daemon
	// runs (odd k) and outliving the restart (even k): twenty made this
	// test a quarter hour of a loaded CI run, for nothing a fourth would
	// not show.
	backends := []crashBackend{
		{name: "local", target: "local", count: 4, flagCheck: hostCheck, release: hostRelease, exited: hostExited},
		{
			name: "docker", target: "docker-image://" + dockerTestImage + "?network=none&name=" + sandbox, count: 3,
			flagCheck: func(round, k int) string { return "[ -e " + sandboxFlag(round, k) + " ]" },
			release: func(t *testing.T, round, k int) {
				dockerExec(t, sandbox, "touch", sandboxFlag(round, k))
			},
			exited: func(t *testing.T, dirs []string) bool {
				script := "for d; do [ -e \"$d/exit\" ] || exit 1; done"
				for _, d := range dirs {
					require.Truef(t, stateDirPattern.MatchString(d), "state directory %q from the Ref is not a plain path", d)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				args := append([]string{"exec", sandbox, "sh", "-c", script, "sh"}, dirs...)
				return exec.CommandContext(ctx, "docker", args...).Run() == nil
			},
		},
		{name: "ssh", target: srv.Target(), count: 3, flagCheck: hostCheck, release: hostRelease, exited: hostExited},
	}

	// Two rounds: the second restart also finds the first round's
	// processes, finished, which is what further rounds would repeat (at
	// about two minutes each in CI).
	const rounds, lines = 2, 300
	// Exit status of every process of the rounds before, which each
	// restart must keep.
	finished := map[string]int{}
	for round := range rounds {
		t0 := time.Now()
		h.startServe()
		label := fmt.Sprintf("round=%d", round)
		type proc struct {
			backend *crashBackend
			k       int // index within the round; exit status k%7
			id      string
		}
		var procs []proc
		for b := range backends {
			for range backends[b].count {
				k := len(procs)
				cmd := fmt.Sprintf("seq 1 %d; until %s; do sleep 0.05; done; seq %d %d; exit %d",
					lines, backends[b].flagCheck(round, k), lines+1, 2*lines, k%7)
				id := strings.TrimSpace(h.mustRun("start", "--backend", backends[b].target, "--label", label, "--", cmd))
				procs = append(procs, proc{backend: &backends[b], k: k, id: id})
			}
		}
		waitCond(t, "first output of every process", func() bool {
			in := h.list(label)
			if len(in) != len(procs) {
				return false
			}
			for _, p := range in {
				if p.OutputBytes < int64(len(seqLines(1, lines))) {
					return false
				}
			}
			return true
		})
		dirs := map[string]string{}
		for _, in := range h.list(label) {
			var d struct {
				Dir string `json:"dir"`
			}
			require.Truef(t, in.Ref != nil, "round %d: %s on %s has no ref to re-attach with", round, in.ID, in.Backend)
			err := json.Unmarshal(in.Ref.Data, &d)
			require.Truef(t, err == nil && d.Dir != "", "round %d: %s on %s: no state directory in the ref %s: %v", round, in.ID, in.Backend, in.Ref.Data, err)
			dirs[in.ID] = d.Dir
		}
		h.crashServe()

		// Odd ones end while no daemon runs.
		ended := map[*crashBackend][]string{}
		for _, p := range procs {
			if p.k%2 == 1 {
				p.backend.release(t, round, p.k)
				ended[p.backend] = append(ended[p.backend], dirs[p.id])
			}
		}
		for b, ds := range ended {
			waitCond(t, "exit files on "+b.name, func() bool { return b.exited(t, ds) })
		}

		t1 := time.Now()
		h.startServe()
		restart := time.Since(t1)
		// The daemon answers at once and re-attaches in the background
		// (processes listed recovering meanwhile).
		got := waitRecovered(t, h, label)
		recovered := time.Since(t1)
		require.Truef(t, len(got) == len(procs), "round %d: %d processes listed after restart, want %d", round, len(got), len(procs))
		byID := map[string]registry.Info{}
		for _, in := range got {
			byID[in.ID] = in
		}
		all := h.list("")
		require.Truef(t, len(all) == len(finished)+len(procs), "round %d: %d processes listed in all, want %d", round, len(all), len(finished)+len(procs))
		for _, in := range all {
			code, ok := finished[in.ID]
			require.Truef(t, !ok || in.State == registry.StateExited && in.Status != nil && in.Status.Code == code, "round %d: %s of an earlier round should still be exited %d: %+v", round, in.ID, code, in)
		}
		for _, p := range procs {
			in, where := byID[p.id], fmt.Sprintf("round %d, %s on %s", round, p.id, p.backend.name)
			require.Truef(t, in.Backend == p.backend.target, "%s: listed with backend %q", where, in.Backend)
			require.Truef(t, p.k%2 != 0 || in.State == registry.StateRunning, "%s should still run, is %s (%s)", where, in.State, in.Reason)
			require.Truef(t, p.k%2 != 1 || in.State == registry.StateExited && in.Status != nil && in.Status.Code == p.k%7, "%s should have exited %d: %+v", where, p.k%7, in)
		}
		for _, p := range procs {
			if p.k%2 == 0 {
				p.backend.release(t, round, p.k)
			}
		}
		want := seqLines(1, 2*lines)
		for _, p := range procs {
			where := fmt.Sprintf("round %d, %s on %s", round, p.id, p.backend.name)
			r := h.run("wait", p.id)
			require.Truef(t, r.code == p.k%7, "%s: wait: %+v", where, r)
			out := h.mustRun("logs", p.id)
			require.Truef(t, out == want, "%s: output %d bytes, want %d (gap or duplicate)", where, len(out), len(want))
			finished[p.id] = p.k % 7
		}
		h.crashServe()
		t.Logf("round %d: %d processes (%d local, %d docker, %d ssh) with %d of earlier rounds: restart %s (answering), %s (re-attached), round %s",
			round, len(procs), backends[0].count, backends[1].count, backends[2].count, len(finished)-len(procs),
			restart.Round(time.Millisecond), recovered.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	}
}

func copyFile(t testing.TB, from, to string, mode os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, data, mode))
}

// dockerExec runs a command in container and fails the test if it fails.
func dockerExec(t *testing.T, container string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", append([]string{"exec", container}, args...)...).CombinedOutput()
	require.NoErrorf(t, err, "docker exec %s %q: %v\n%s", container, args, err, out)
}
