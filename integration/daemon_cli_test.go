package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/registry"
)

// TestDaemonCLI drives the background-process commands end to end through
// an auto-started daemon.
func TestDaemonCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the corral binary")
	}
	h := newDaemonHome(t, buildCorral(t))
	r := h.run("start", "--label", "k=v", "--stdin", "--", "read x; echo got:$x; exit 4")
	require.Truef(t, r.code == 0 && strings.Contains(r.stderr, "started the corral daemon"), "first start: %+v", r)
	id := strings.TrimSpace(r.stdout)
	require.Truef(t, registry.ValidID(id), "start printed %q", id)
	ps := h.mustRun("ps", "--label", "k=v")
	require.Truef(t, strings.Contains(ps, id) && strings.Contains(ps, "running"), "ps:\n%s", ps)
	h.mustRun("send", id[:9], "hello")
	if r := h.run("wait", id); r.code != 4 {
		require.FailNow(t, fmt.Sprintf("wait: %+v", r))
	}
	if out := h.mustRun("logs", id); out != "got:hello\n" {
		require.FailNow(t, fmt.Sprintf("logs %q", out))
	}
	if out := h.mustRun("logs", "--since-byte", "4", id); out != "hello\n" {
		require.FailNow(t, fmt.Sprintf("logs --since-byte %q", out))
	}
	id2 := strings.TrimSpace(h.mustRun("start", "--", "seq 1 5; echo end"))
	if out := h.mustRun("logs", "-f", "--tail", "2", id2); !strings.HasSuffix(out, "5\nend\n") {
		require.FailNow(t, fmt.Sprintf("logs -f --tail 2 %q", out))
	}
	if r := h.run("wait", "--timeout", "50ms", strings.TrimSpace(h.mustRun("start", "--", "sleep 6391.7"))); r.code != 124 {
		require.FailNow(t, fmt.Sprintf("wait --timeout: %+v", r))
	}
	// Usage errors: one line, exit 2.
	for _, args := range [][]string{
		{"logs", "proc_000000000000"}, {"kill", "zz"}, {"kill", "-s", "NOPE", id}, {"wait", "--timeout", "soon", id},
		{"rm", "0000"},
	} {
		r := h.run(args...)
		assert.Truef(t, r.code == 2 && strings.Count(strings.TrimSpace(r.stderr), "\n") == 0, "corral %q: exit %d stderr %q", args, r.code, r.stderr)
	}
	// rm a running process is refused; after kill --all it works.
	if r := h.run("rm", id2); r.code != 0 {
		require.FailNow(t, fmt.Sprintf("rm finished: %+v", r))
	}
	var killed []registry.KillResult
	if err := json.Unmarshal([]byte(h.mustRun("kill", "--all", "--json")), &killed); err != nil || len(killed) != 1 || killed[0].State != registry.StateKilled {
		require.FailNow(t, fmt.Sprintf("kill --all: %+v %v", killed, err))
	}
	ev := h.mustRun("events", "--json")
	require.Truef(t, strings.Contains(ev, `"type": "started"`), "events: %s", ev)
	out := h.mustRun("doctor")
	require.Truef(t, strings.Contains(out, "daemon") && strings.Contains(out, "pty"), "doctor:\n%s", out)
	if r := h.run("shutdown"); r.code != 0 {
		require.FailNow(t, fmt.Sprintf("shutdown: %+v", r))
	}
	_, err := os.Stat(h.socket)
	require.Truef(t, os.IsNotExist(err), "socket left after shutdown: %v", err)
}

// TestDaemonCrashRecovery kills the daemon with SIGKILL while 20 processes
// run, lets half of them end while it is down, restarts it, and checks
// every state, exit status and byte of output. Ten rounds.
func TestDaemonCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the corral binary")
	}
	h := newDaemonHome(t, buildCorral(t))
	flags := t.TempDir()
	const n, lines = 20, 300
	for round := range 10 {
		h.startServe()
		label := fmt.Sprintf("round=%d", round)
		ids := make([]string, n)
		for k := range n {
			flag := filepath.Join(flags, fmt.Sprintf("%d-%d", round, k))
			// Output before the crash, a wait for the flag, output after.
			// The loop also ends when the flag directory is gone, so that a
			// failed run (its daemon crashed for good) leaves nothing
			// polling behind.
			cmd := fmt.Sprintf("seq 1 %d; while [ ! -e %s ] && [ -d %s ]; do sleep 0.05; done; seq %d %d; exit %d", lines, flag, flags, lines+1, 2*lines, k%7)
			ids[k] = strings.TrimSpace(h.mustRun("start", "--label", label, "--", cmd))
		}
		waitCond(t, "first output of every process", func() bool {
			for _, in := range h.list(label) {
				if in.OutputBytes < int64(len(seqLines(1, lines))) {
					return false
				}
			}
			return true
		})
		refs := map[string]string{}
		for _, in := range h.list(label) {
			var d struct {
				Dir string `json:"dir"`
			}
			json.Unmarshal(in.Ref.Data, &d)
			refs[in.ID] = d.Dir
		}
		h.crashServe()

		// Odd ones end while no daemon runs.
		for k := 1; k < n; k += 2 {
			os.WriteFile(filepath.Join(flags, fmt.Sprintf("%d-%d", round, k)), nil, 0o600)
		}
		for k := 1; k < n; k += 2 {
			dir := refs[ids[k]]
			waitCond(t, "exit of "+ids[k], func() bool { return exitRecorded(dir) })
		}

		h.startServe()
		got := h.list(label)
		require.Truef(t, len(got) == n, "round %d: %d processes listed after restart, want %d", round, len(got), n)
		byID := map[string]registry.Info{}
		for _, in := range got {
			byID[in.ID] = in
		}
		for k, id := range ids {
			in := byID[id]
			require.Truef(t, k%2 != 0 || in.State == registry.StateRunning, "round %d: %s should still run, is %s (%s)", round, id, in.State, in.Reason)
			require.Truef(t, k%2 != 1 || in.State == registry.StateExited && in.Status != nil && in.Status.Code == k%7, "round %d: %s should have exited %d: %+v", round, id, k%7, in)
		}
		for k := 0; k < n; k += 2 {
			os.WriteFile(filepath.Join(flags, fmt.Sprintf("%d-%d", round, k)), nil, 0o600)
		}
		want := seqLines(1, 2*lines)
		for k, id := range ids {
			r := h.run("wait", id)
			require.Truef(t, r.code == k%7, "round %d: wait %s: %+v", round, id, r)
			out := h.mustRun("logs", id)
			require.Truef(t, out == want, "round %d: output of %s: %d bytes, want %d (gap or duplicate)", round, id, len(out), len(want))
		}
		h.crashServe()
	}
}

func seqLines(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		b.WriteString(strconv.Itoa(i))
		b.WriteByte('\n')
	}
	return b.String()
}

// TestDaemonRefusesOtherUID runs a client as uid 65534: with the socket's
// default permissions the kernel refuses it; with the permissions opened
// on purpose, the daemon's SO_PEERCRED check refuses it with a clear line.
func TestDaemonRefusesOtherUID(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the corral binary")
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client as another uid")
	}
	bin := buildCorral(t)
	h := newDaemonHome(t, bin)
	h.startServe()
	// A copy of the binary that uid 65534 can execute.
	pub, err := os.MkdirTemp("", "cdpub")
	require.NoError(t, err)
	defer os.RemoveAll(pub)
	os.Chmod(pub, 0o755)
	data, _ := os.ReadFile(bin)
	pubBin := filepath.Join(pub, "corral")
	require.NoError(t, os.WriteFile(pubBin, data, 0o755))
	asNobody := func() cliResult {
		cmd := exec.Command(pubBin, "ps")
		cmd.Env = []string{"HOME=" + pub, "CORRAL_SOCKET=" + h.socket, "CORRAL_NO_AUTOSTART=1", "PATH=/usr/bin:/bin"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		cmd.Run()
		return cliResult{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errOut.String()}
	}
	if r := asNobody(); r.code == 0 || !strings.Contains(r.stderr, "permission denied") {
		require.FailNow(t, fmt.Sprintf("other uid with default permissions: %+v", r))
	}
	// Open the path to everyone: only SO_PEERCRED stands in the way now.
	for _, p := range []string{filepath.Dir(filepath.Dir(h.socket)), filepath.Dir(filepath.Dir(filepath.Dir(h.socket))), filepath.Dir(h.socket)} {
		os.Chmod(p, 0o777)
	}
	os.Chmod(h.socket, 0o666)
	r := asNobody()
	require.Truef(t, r.code == 125 && strings.Contains(r.stderr, "serves only uid 0"), "other uid through open permissions: %+v", r)
	t.Logf("refused: %s", strings.TrimSpace(r.stderr))
	log, _ := os.ReadFile(filepath.Join(h.home, "serve.log"))
	require.Truef(t, strings.Contains(string(log), "refused a connection from another user") && strings.Contains(string(log), "peer_uid=65534"), "daemon log does not report the refusal:\n%s", log)
	out := h.mustRun("ps")
	require.Truef(t, strings.Contains(out, "ID"), "owner refused? %q", out)
}

// TestDaemonConcurrentCLI fires 200 CLI calls at once and reports the
// latency distribution.
func TestDaemonConcurrentCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the corral binary")
	}
	h := newDaemonHome(t, buildCorral(t))
	h.startServe()
	id := strings.TrimSpace(h.mustRun("start", "--", "echo hi"))
	const calls = 200
	lat := make([]time.Duration, calls)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	for i := range calls {
		wg.Go(func() {
			var args []string
			switch i % 4 {
			case 0:
				args = []string{"ps", "-a"}
			case 1:
				args = []string{"logs", id}
			case 2:
				args = []string{"start", "--", "true"}
			default:
				args = []string{"ps", "--json"}
			}
			t0 := time.Now()
			cmd := exec.Command(h.bin, args...)
			cmd.Env = append(slices.Clip(h.env), "CORRAL_NO_AUTOSTART=1") // Clip: goroutines must not share the spare capacity
			out, err := cmd.CombinedOutput()
			lat[i] = time.Since(t0)
			if err != nil {
				mu.Lock()
				failures = append(failures, fmt.Sprintf("%q: %v: %s", args, err, out))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		require.FailNow(t, fmt.Sprintf("%d of %d calls failed, first: %s", len(failures), calls, failures[0]))
	}
	slices.Sort(lat)
	t.Logf("%d concurrent CLI calls (process start included): p50 %s, p99 %s, max %s", calls, lat[calls/2], lat[calls*99/100], lat[calls-1])
}

// TestDaemonPS1000 tracks 1,000 processes and measures `corral ps -a` end
// to end (a measurement for the log, not an assertion).
func TestDaemonPS1000(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the corral binary")
	}
	h := newDaemonHome(t, buildCorral(t))
	h.startServe()
	c := daemon.NewClient(h.socket)
	defer c.CloseIdle()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	errs := make(chan error, 1000)
	for range 1000 {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := c.Start(ctx, registry.StartOptions{Command: "true", Labels: map[string]string{"bulk": "1"}}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.FailNow(t, fmt.Sprint(err))
	}
	var runs []time.Duration
	var lines int
	for range 15 {
		t0 := time.Now()
		out := h.mustRun("ps", "-a")
		runs = append(runs, time.Since(t0))
		lines = strings.Count(out, "\n")
	}
	require.Truef(t, lines == 1001, "ps -a printed %d lines, want 1001", lines)
	slices.Sort(runs)
	t.Logf("corral ps -a with 1000 tracked processes, end to end: median %s, min %s, max %s", runs[len(runs)/2], runs[0], runs[len(runs)-1])
}

// TestDaemonGracefulStopKeepsProcesses: SIGTERM stops the daemon but not
// its processes; the next daemon re-attaches them.
func TestDaemonGracefulStopKeepsProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the corral binary")
	}
	h := newDaemonHome(t, buildCorral(t))
	h.startServe()
	dir := t.TempDir()
	flag := filepath.Join(dir, "go")
	id := strings.TrimSpace(h.mustRun("start", "--", fmt.Sprintf("echo before; while [ ! -e %s ] && [ -d %s ]; do sleep 0.05; done; echo after; exit 9", flag, dir)))
	waitCond(t, "first output", func() bool { return h.mustRun("logs", id) == "before\n" })
	h.serve.Process.Signal(syscall.SIGTERM)
	require.NoError(t, h.serve.Wait(), "serve after SIGTERM")
	h.serve = nil
	_, err := os.Stat(h.socket)
	require.Truef(t, os.IsNotExist(err), "socket left: %v", err)
	h.startServe()
	in := h.list("")
	require.Truef(t, len(in) == 1 && in[0].State == registry.StateRunning, "after graceful restart: %+v", in)
	os.WriteFile(flag, nil, 0o600)
	r := h.run("wait", id)
	require.Truef(t, r.code == 9, "wait: %+v", r)
	out := h.mustRun("logs", id)
	require.Truef(t, out == "before\nafter\n", "logs %q", out)
}
