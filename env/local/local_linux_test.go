package local

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/procstat"
)

func newTestEnv(t *testing.T, disableCgroup bool) *Env {
	t.Helper()
	return newTestEnvIn(t, t.TempDir(), disableCgroup)
}

// mechanisms runs f once per tree-kill mechanism this machine offers.
func mechanisms(t *testing.T, f func(t *testing.T, disableCgroup bool)) {
	t.Run("cgroup", func(t *testing.T) {
		if _, _, err := findCgroup(); err != nil {
			t.Skipf("cgroup v2 not usable here: %v", err)
		}
		f(t, false)
	})
	t.Run("pgroup+scan", func(t *testing.T) { f(t, true) })
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// marker is a unique sleep duration, so the test can find its own
// processes and no one else's.
func marker() string { return fmt.Sprintf("%d.%03d", 5000+rand.IntN(4000), rand.IntN(1000)) }

func start(t *testing.T, e *Env, spec env.Spec) env.Process {
	t.Helper()
	p, err := e.Start(testCtx(t), spec)
	require.NoErrorf(t, err, "Start(%q)", spec.Command)
	t.Cleanup(func() {
		_ = p.Signal(context.Background(), env.SIGKILL)
		_, _ = p.Wait(testCtx(t))
		_ = p.Release()
	})
	return p
}

func readAll(t *testing.T, p env.Process, offset int64) string {
	t.Helper()
	r, err := p.Output(testCtx(t), offset)
	require.NoErrorf(t, err, "Output(%d)", offset)
	defer r.Close()
	b, err := io.ReadAll(r)
	require.NoErrorf(t, err, "reading output: %v (got %q)", err, b)
	return string(b)
}

func wait(t *testing.T, p env.Process) env.ExitStatus {
	t.Helper()
	st, err := p.Wait(testCtx(t))
	require.NoError(t, err, "Wait")
	return st
}

// eventually polls cond until it holds or a generous deadline passes.
// condWait bounds a wait for a condition (require.Eventually), which is
// looked at again every condPoll.
const (
	condWait = 30 * time.Second
	condPoll = 20 * time.Millisecond
)

func TestCapabilities(t *testing.T) {
	mechanisms(t, func(t *testing.T, disableCgroup bool) {
		e := newTestEnv(t, disableCgroup)
		defer e.Close()
		c := e.Capabilities()
		want := "cgroup"
		if disableCgroup {
			want = "pgroup+scan"
		}
		assert.Truef(t, c.TreeKill == want, "TreeKill = %q, want %q", c.TreeKill, want)
		assert.Truef(t, c.PTY && c.Resize && c.Stdin && c.Reattach && c.ReattachPTY && !c.ReplayOutput && len(c.Notes) != 0, "Capabilities = %+v", c)
		if e.Name() != "local" {
			assert.Fail(t, fmt.Sprintf("Name = %q", e.Name()))
		}
	})
}

// TestCgroupPerProcess checks that a process really runs in a cgroup of
// its own, and that the cgroup is removed once the tree is gone.
func TestCgroupPerProcess(t *testing.T) {
	if _, _, err := findCgroup(); err != nil {
		t.Skipf("cgroup v2 not usable here: %v", err)
	}
	e := newTestEnv(t, false)
	defer e.Close()
	p := start(t, e, env.Spec{Command: "cat /proc/self/cgroup"})
	out := readAll(t, p, 0)
	st := wait(t, p)
	require.Truef(t, st.Success(), "status %v", st)
	re := regexp.MustCompile(`(?m)^0::(` + regexp.QuoteMeta(e.sys.cgroupRel) + `/[0-9a-f]{16})$`)
	m := re.FindStringSubmatch(out)
	require.Truef(t, m != nil, "cgroup of the command = %q, want one under %s", out, e.sys.cgroupRel)
	dir := filepath.Join(e.sys.cgroupRoot, m[1])
	require.Eventually(t, func() bool {
		_, err := os.Stat(dir)
		return errors.Is(err, os.ErrNotExist)
	}, condWait, condPoll, "waiting for cgroup %s to be removed", dir)
}

func TestSecretFiltering(t *testing.T) {
	e, err := New(Options{
		StateDir: t.TempDir(),
		Environ: []string{
			"PATH=" + os.Getenv("PATH"), "GITHUB_TOKEN=ghp_leak", "FOO_API_KEY=key_leak",
			"ALLOWED_TOKEN=allowed_ok", "PLAIN_VAR=plain_ok",
		},
		AllowEnv: []string{"ALLOWED_TOKEN"},
	})
	require.NoError(t, err)
	defer e.Close()
	for _, spec := range []env.Spec{
		{Command: "env", Env: []string{"BAR_SECRET=explicit_ok", shimEnvVar + "=1:/tmp"}},
		{Command: "env", Env: []string{"BAR_SECRET=explicit_ok"}, PTY: &env.WindowSize{Rows: 24, Cols: 200}},
	} {
		out := readAll(t, start(t, e, spec), 0)
		for _, leak := range []string{"ghp_leak", "key_leak", "GITHUB_TOKEN", "FOO_API_KEY"} {
			assert.Falsef(t, strings.Contains(out, leak), "pty=%v: %s reached the command:\n%s", spec.PTY != nil, leak, out)
		}
		for _, ok := range []string{"ALLOWED_TOKEN=allowed_ok", "PLAIN_VAR=plain_ok", "BAR_SECRET=explicit_ok"} {
			assert.Truef(t, strings.Contains(out, ok), "pty=%v: %s missing:\n%s", spec.PTY != nil, ok, out)
		}
		assert.Falsef(t, strings.Contains(out, shimEnvVar), "%s leaked into the command", shimEnvVar)
	}
	// Detached commands get the same environment through the shim.
	out := readAll(t, start(t, e, env.Spec{Command: "env", Env: []string{"BAR_SECRET=explicit_ok", shimEnvVar + "=1:/tmp"}, Detach: true}), 0)
	assert.Truef(t, !strings.Contains(out, "ghp_leak") && !strings.Contains(out, shimEnvVar) && strings.Contains(out, "BAR_SECRET=explicit_ok") && strings.Contains(out, "ALLOWED_TOKEN=allowed_ok"), "detached environment wrong:\n%s", out)
}

// TestIdentityCheck attaches to a forged state naming a live stranger's PID
// (same PID, wrong start time): no signal may reach it.
func TestIdentityCheck(t *testing.T) {
	mechanisms(t, func(t *testing.T, disableCgroup bool) {
		stateDir := t.TempDir()
		e := newTestEnvIn(t, stateDir, disableCgroup)
		defer e.Close()

		// The stranger leads its own group, so a kill(-pgid) would hit it.
		victim := exec.Command("sleep", marker())
		victim.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		require.NoError(t, victim.Start())
		t.Cleanup(func() { _ = victim.Process.Kill(); _ = victim.Wait() })
		st, err := procstat.Read(victim.Process.Pid)
		require.NoError(t, err)
		id := newID()
		dir := filepath.Join(stateDir, id)
		require.NoError(t, os.Mkdir(dir, 0o700))
		forged := shimState{PID: victim.Process.Pid, StartTime: st.StartTime + 1, ShimPID: victim.Process.Pid, ShimStart: st.StartTime + 1}
		if disableCgroup {
			forged.Tag = treeTagPrefix + id
		} else {
			forged.Cgroup = filepath.Join(e.sys.cgroupRel, id)
		}
		require.NoError(t, writeJSONAtomic(filepath.Join(dir, fileState), forged))
		data, _ := json.Marshal(refData{ID: id, Dir: dir, PID: forged.PID, StartTime: forged.StartTime})
		p, err := e.Attach(testCtx(t), env.Ref{Env: "local", PID: forged.PID, Data: data})
		require.NoError(t, err, "Attach")
		for _, sig := range []env.Signal{env.SIGKILL, env.SIGTERM} {
			err := p.Signal(testCtx(t), sig)
			assert.Truef(t, errors.Is(err, env.ErrExited), "Signal(%s) on a reused PID = %v, want ErrExited", sig, err)
		}
		if surv, err := p.Survivors(testCtx(t)); err != nil || len(surv) != 0 {
			assert.Fail(t, fmt.Sprintf("Survivors = %v, %v; want none (the PID is a stranger's)", surv, err))
		}
		assert.NoError(t, p.Remove(testCtx(t)), "Remove of a dead process's state")
		// Had KILL or TERM reached it, it would not end by our INT now.
		require.NoError(t, victim.Process.Signal(syscall.SIGINT), "the stranger is gone")
		err = victim.Wait()
		var ee *exec.ExitError
		assert.Truef(t, errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGINT, "stranger ended with %v, want SIGINT (ours)", err)

		// A Ref whose start time disagrees with the recorded state is
		// refused outright.
		require.NoError(t, os.Mkdir(dir, 0o700))
		forged.StartTime = st.StartTime
		require.NoError(t, writeJSONAtomic(filepath.Join(dir, fileState), forged))
		data, _ = json.Marshal(refData{ID: id, Dir: dir, PID: forged.PID, StartTime: st.StartTime + 7})
		if _, err := e.Attach(testCtx(t), env.Ref{Env: "local", Data: data}); !errors.Is(err, env.ErrNotFound) {
			assert.Fail(t, fmt.Sprintf("Attach with a wrong start time = %v, want ErrNotFound", err))
		}
	})
}

func TestAttachValidatesRef(t *testing.T) {
	stateDir := t.TempDir()
	e := newTestEnvIn(t, stateDir, false)
	defer e.Close()
	id := newID()
	outside := t.TempDir()
	cases := map[string]env.Ref{
		"other env":     {Env: "docker://x", Data: json.RawMessage(`{}`)},
		"outside":       {Env: "local", Data: mustJSON(t, refData{ID: id, Dir: filepath.Join(outside, id), PID: 1})},
		"traversal":     {Env: "local", Data: mustJSON(t, refData{ID: id, Dir: filepath.Join(stateDir, "..", id), PID: 1})},
		"bad id":        {Env: "local", Data: mustJSON(t, refData{ID: "../../etc", Dir: stateDir, PID: 1})},
		"unknown field": {Env: "local", Data: json.RawMessage(`{"id":"` + id + `","dir":"` + filepath.Join(stateDir, id) + `","evil":1}`)},
		"missing dir":   {Env: "local", Data: mustJSON(t, refData{ID: id, Dir: filepath.Join(stateDir, id), PID: 1})},
		"not json":      {Env: "local", Data: json.RawMessage(`[1,2]`)},
	}
	for name, ref := range cases {
		if p, err := e.Attach(testCtx(t), ref); err == nil {
			_ = p.Release()
			assert.Fail(t, fmt.Sprintf("%s: Attach succeeded", name))
		}
	}
	data := mustJSON(t, refData{ID: id, Dir: filepath.Join(stateDir, id), PID: 1})
	_, err := e.Attach(testCtx(t), env.Ref{Env: "local", Data: data})
	assert.Truef(t, errors.Is(err, env.ErrNotFound), "missing directory: %v, want ErrNotFound", err)
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// TestReattachAfterSupervisorKilled starts a detached process from a
// helper supervisor (this test binary re-executed), SIGKILLs the helper,
// and drives the process from a new Env: stdin, full output, the real
// exit status — a code of 143 is not SIGTERM, and SIGTERM is not 143.
func TestReattachAfterSupervisorKilled(t *testing.T) {
	mechanisms(t, func(t *testing.T, disableCgroup bool) {
		for _, tc := range []struct {
			name, tail string
			want       env.ExitStatus
		}{
			{"code143", "exit 143", env.Exited(143)},
			{"SIGTERM", "kill -TERM $$; exit 3", env.Signaled(env.SIGTERM)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				stateDir := t.TempDir()
				ref := runHelper(t, stateDir, disableCgroup, `echo start; read x; echo "got $x"; `+tc.tail)

				e := newTestEnvIn(t, stateDir, disableCgroup)
				defer e.Close()
				p, err := e.Attach(testCtx(t), ref)
				require.NoError(t, err, "Attach")
				defer p.Release()
				if _, err := p.Write(testCtx(t), []byte("hello\n")); err != nil {
					require.FailNow(t, fmt.Sprintf("Write: %v", err))
				}
				require.NoError(t, p.CloseStdin(testCtx(t)), "CloseStdin")
				if got := readAll(t, p, 0); got != "start\ngot hello\n" {
					assert.Fail(t, fmt.Sprintf("output = %q", got))
				}
				got := readAll(t, p, 6)
				assert.Truef(t, got == "got hello\n", "output from offset 6 = %q", got)
				st := wait(t, p)
				assert.Truef(t, st == tc.want, "status = %v, want %v", st, tc.want)
				if err := p.Signal(testCtx(t), env.SIGKILL); !errors.Is(err, env.ErrExited) {
					assert.Fail(t, fmt.Sprintf("Signal after exit = %v, want ErrExited", err))
				}
				if _, err := p.Write(testCtx(t), []byte("x")); !errors.Is(err, env.ErrStdinClosed) {
					assert.Fail(t, fmt.Sprintf("Write after CloseStdin = %v, want ErrStdinClosed", err))
				}
				require.NoError(t, p.Remove(testCtx(t)), "Remove")
				if _, err := e.Attach(testCtx(t), ref); !errors.Is(err, env.ErrNotFound) {
					assert.Fail(t, fmt.Sprintf("Attach after Remove = %v, want ErrNotFound", err))
				}
			})
		}
	})
}

// runHelper starts the helper supervisor, reads the Ref it prints, and
// kills it with SIGKILL.
func runHelper(t *testing.T, stateDir string, disableCgroup bool, command string) env.Ref {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnvVar+"="+stateDir, helperCmdEnvVar+"="+command, helperStdinEnvVar+"=1")
	if disableCgroup {
		cmd.Env = append(cmd.Env, helperNoCgroupVar+"=1")
	}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		require.FailNow(t, fmt.Sprintf("helper printed no ref: %v", err))
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	err = cmd.Wait()
	var ee *exec.ExitError
	require.Truef(t, errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL, "helper ended with %v, want SIGKILL", err)
	var ref env.Ref
	require.NoErrorf(t, json.Unmarshal(line, &ref), "helper ref %q", line)
	return ref
}

// TestKillRacingExit signals processes that are exiting on their own: the
// outcome is either the natural status (and Signal may say ErrExited) or
// SIGKILL — never an error of another kind, a hang or a wrong status.
func TestKillRacingExit(t *testing.T) {
	mechanisms(t, func(t *testing.T, disableCgroup bool) {
		e := newTestEnv(t, disableCgroup)
		defer e.Close()
		for i := range 100 {
			p, err := e.Start(testCtx(t), env.Spec{Command: "exit 7"})
			require.NoError(t, err)
			sigErr := p.Signal(testCtx(t), env.SIGKILL)
			require.Truef(t, sigErr == nil || errors.Is(sigErr, env.ErrExited), "round %d: Signal = %v", i, sigErr)
			st := wait(t, p)
			switch {
			case st == env.Exited(7):
			case st == env.Signaled(env.SIGKILL) && sigErr == nil:
			default:
				require.FailNow(t, fmt.Sprintf("round %d: status %v after Signal returned %v", i, st, sigErr))
			}
			_ = p.Release()
		}
	})
}

// TestGrandchildHoldsOutput: the stream and Wait end although a background
// grandchild keeps the output pipe open; Signal after the exit still
// reaches that grandchild (and reports ErrExited).
func TestGrandchildHoldsOutput(t *testing.T) {
	mechanisms(t, func(t *testing.T, disableCgroup bool) {
		e := newTestEnv(t, disableCgroup)
		defer e.Close()
		for _, pty := range []*env.WindowSize{nil, {Rows: 24, Cols: 80}} {
			p := start(t, e, env.Spec{Command: "sleep " + marker() + " & echo done", PTY: pty})
			got := readAll(t, p, 0)
			assert.Truef(t, strings.TrimSpace(got) == "done", "pty=%v: output %q", pty != nil, got)
			st := wait(t, p)
			assert.Truef(t, st.Success(), "status %v", st)
			surv, err := p.Survivors(testCtx(t))
			if err != nil || len(surv) == 0 {
				// On a PTY the hangup of the session may end the sleep.
				require.Truef(t, pty != nil, "Survivors = %v, %v; want the sleeping grandchild", surv, err)
			}
			if err := p.Signal(testCtx(t), env.SIGKILL); !errors.Is(err, env.ErrExited) {
				assert.Fail(t, fmt.Sprintf("Signal after exit = %v, want ErrExited", err))
			}
			ctx := testCtx(t)
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				surv, err := p.Survivors(ctx)
				require.NoError(c, err)
				assert.Empty(c, surv)
			}, condWait, condPoll, "waiting for Survivors to show the grandchild killed")
		}
	})
}

func TestLiveOutputOpensOnce(t *testing.T) {
	e := newTestEnv(t, false)
	defer e.Close()
	p := start(t, e, env.Spec{Command: "echo 0123456789"})
	got := readAll(t, p, 4)
	assert.Truef(t, got == "456789\n", "output from offset 4 = %q", got)
	if _, err := p.Output(testCtx(t), 0); !errors.Is(err, env.ErrUnsupported) {
		assert.Fail(t, fmt.Sprintf("second Output = %v, want ErrUnsupported", err))
	}
	_, err := p.Ref()
	assert.Truef(t, errors.Is(err, env.ErrUnsupported), "Ref of a non-detached process = %v, want ErrUnsupported", err)
}

func TestDetachedRules(t *testing.T) {
	e := newTestEnv(t, false)
	defer e.Close()
	m := marker()
	p := start(t, e, env.Spec{Command: "echo up; exec sleep " + m, Detach: true})
	// Signal only once the shell has written: a TERM before the echo
	// would leave no output to replay.
	r, err := p.Output(testCtx(t), 0)
	require.NoError(t, err)
	if b, err := io.ReadAll(io.LimitReader(r, 3)); err != nil || string(b) != "up\n" {
		require.FailNow(t, fmt.Sprintf("first output %q, %v", b, err))
	}
	_ = r.Close()
	if err := p.Remove(testCtx(t)); err == nil {
		require.FailNow(t, "Remove of a running process succeeded")
	}
	if err := p.Resize(testCtx(t), env.WindowSize{Rows: 2, Cols: 2}); !errors.Is(err, env.ErrUnsupported) {
		assert.Fail(t, fmt.Sprintf("Resize = %v, want ErrUnsupported", err))
	}
	require.NoError(t, p.Signal(testCtx(t), env.SIGTERM))
	st := wait(t, p)
	assert.Truef(t, st == env.Signaled(env.SIGTERM), "status %v", st)
	// Replay: any number of streams from any offset.
	for range 2 {
		got := readAll(t, p, 1)
		assert.Truef(t, got == "p\n", "output from 1 = %q", got)
	}
	require.NoError(t, p.Remove(testCtx(t)))
	assert.NoError(t, p.Release(), "Release after Remove")
	if _, err := p.Wait(testCtx(t)); !errors.Is(err, env.ErrReleased) {
		assert.Fail(t, fmt.Sprintf("Wait after Remove = %v, want ErrReleased", err))
	}
	require.NoError(t, e.Close())
	if _, err := e.Start(testCtx(t), env.Spec{Command: "true"}); !errors.Is(err, env.ErrReleased) {
		assert.Fail(t, fmt.Sprintf("Start after Close = %v, want ErrReleased", err))
	}
}

// TestCloseKeepsDetached: Close kills the non-detached tree and leaves the
// detached process running for a later Attach.
func TestCloseKeepsDetached(t *testing.T) {
	mechanisms(t, func(t *testing.T, disableCgroup bool) {
		stateDir := t.TempDir()
		e := newTestEnvIn(t, stateDir, disableCgroup)
		plain, err := e.Start(testCtx(t), env.Spec{Command: "sleep " + marker() + " & sleep " + marker()})
		require.NoError(t, err)
		det, err := e.Start(testCtx(t), env.Spec{Command: "read x; echo $x", Detach: true, Stdin: true})
		require.NoError(t, err)
		ref, err := det.Ref()
		require.NoError(t, err)
		pt := plain.(*child).tree
		require.NoError(t, e.Close())
		if _, err := plain.Wait(testCtx(t)); !errors.Is(err, env.ErrReleased) {
			assert.Fail(t, fmt.Sprintf("Wait after Close = %v, want ErrReleased", err))
		}
		if surv, err := pt.survivors(false); err != nil || len(surv) != 0 {
			assert.Fail(t, fmt.Sprintf("non-detached tree survived Close: %v %v", surv, err))
		}
		e2 := newTestEnvIn(t, stateDir, disableCgroup)
		defer e2.Close()
		p, err := e2.Attach(testCtx(t), ref)
		require.NoError(t, err)
		defer p.Release()
		if _, err := p.Write(testCtx(t), []byte("still-here\n")); err != nil {
			require.FailNow(t, fmt.Sprint(err))
		}
		got := readAll(t, p, 0)
		assert.Truef(t, got == "still-here\n", "output %q", got)
		st := wait(t, p)
		assert.Truef(t, st.Success(), "status %v", st)
	})
}

// TestStdinDeadlineDoesNotStick: a Write bounded by a context deadline
// must not leave that deadline on stdin for later writes.
func TestStdinDeadlineDoesNotStick(t *testing.T) {
	e := newTestEnv(t, false)
	defer e.Close()
	for _, spec := range []env.Spec{
		{Command: "head -n 2", Stdin: true},
		{Command: "stty -echo; head -n 2", Stdin: true, PTY: &env.WindowSize{Rows: 24, Cols: 80}},
		{Command: "head -n 2", Stdin: true, Detach: true},
	} {
		p := start(t, e, spec)
		short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		if _, err := p.Write(short, []byte("one\n")); err != nil {
			require.FailNow(t, fmt.Sprintf("first Write: %v", err))
		}
		<-short.Done()
		cancel()
		if _, err := p.Write(context.Background(), []byte("two\n")); err != nil {
			require.FailNow(t, fmt.Sprintf("pty=%v detach=%v: Write after an earlier deadline passed: %v", spec.PTY != nil, spec.Detach, err))
		}
		got := strings.ReplaceAll(readAll(t, p, 0), "\r", "")
		assert.Truef(t, strings.HasSuffix(got, "one\ntwo\n"), "output %q", got)
		st := wait(t, p)
		assert.Truef(t, st.Success(), "status %v", st)
		_, err := p.Write(context.Background(), []byte("x"))
		assert.Truef(t, errors.Is(err, env.ErrExited), "Write after exit = %v, want ErrExited", err)
	}
}

// TestAttachAcrossMechanisms: a supervisor configured differently (no
// cgroups) still controls a process started in a cgroup, and vice versa.
func TestAttachAcrossMechanisms(t *testing.T) {
	if _, _, err := findCgroup(); err != nil {
		t.Skipf("cgroup v2 not usable here: %v", err)
	}
	for _, startNoCgroup := range []bool{false, true} {
		stateDir := t.TempDir()
		e1 := newTestEnvIn(t, stateDir, startNoCgroup)
		p1 := start(t, e1, env.Spec{Command: "setsid sleep " + marker() + " & exec sleep " + marker(), Detach: true})
		ref, err := p1.Ref()
		require.NoError(t, err)
		_ = e1.Close()
		e2 := newTestEnvIn(t, stateDir, !startNoCgroup)
		defer e2.Close()
		p, err := e2.Attach(testCtx(t), ref)
		require.NoError(t, err, "Attach")
		ctx := testCtx(t)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			surv, err := p.Survivors(ctx)
			require.NoError(c, err)
			assert.Len(c, surv, 2)
		}, condWait, condPoll, "waiting for Survivors to show two processes in the tree")
		require.NoError(t, p.Signal(testCtx(t), env.SIGKILL))
		st := wait(t, p)
		assert.Truef(t, st == env.Signaled(env.SIGKILL), "status %v", st)
		ctx = testCtx(t)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			surv, err := p.Survivors(ctx)
			require.NoError(c, err)
			assert.Empty(c, surv)
		}, condWait, condPoll, "waiting for Survivors to show the tree gone")
		_ = p.Release()
	}
}

// TestShimLost: a shim killed by hand leaves the status unknowable; Wait
// and Output must say so instead of hanging, and the tree stays killable.
func TestShimLost(t *testing.T) {
	e := newTestEnv(t, false)
	defer e.Close()
	p := start(t, e, env.Spec{Command: "echo up; exec sleep " + marker(), Detach: true})
	d := p.(*detached)
	r, err := p.Output(testCtx(t), 0)
	require.NoError(t, err)
	if b, err := io.ReadAll(io.LimitReader(r, 3)); err != nil || string(b) != "up\n" {
		require.FailNow(t, fmt.Sprintf("first output %q, %v", b, err))
	}
	_ = r.Close()
	require.NoError(t, syscall.Kill(d.st.ShimPID, syscall.SIGKILL))
	if _, err := p.Wait(testCtx(t)); err == nil || !strings.Contains(err.Error(), "shim") {
		assert.Fail(t, fmt.Sprintf("Wait after the shim died = %v, want an error naming the shim", err))
	}
	got := readAll(t, p, 0)
	assert.Truef(t, got == "up\n", "output %q", got)
	assert.NoError(t, p.Signal(testCtx(t), env.SIGKILL), "Signal")
	ctx := testCtx(t)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		surv, err := p.Survivors(ctx)
		require.NoError(c, err)
		assert.Empty(c, surv)
	}, condWait, condPoll, "waiting for Survivors to show the tree gone")
}

// TestCloseKillsReleased: a non-detached process whose handle was
// released can only be stopped by Env.Close, which must do it.
func TestCloseKillsReleased(t *testing.T) {
	e := newTestEnv(t, false)
	p, err := e.Start(testCtx(t), env.Spec{Command: "sleep " + marker()})
	require.NoError(t, err)
	c := p.(*child)
	require.NoError(t, p.Release())
	require.NoError(t, e.Close())
	select {
	case <-c.done:
	default:
		require.FailNow(t, "Close returned while the released process still runs")
	}
	assert.Truef(t, c.status == env.Signaled(env.SIGKILL), "status %v, want SIGKILL", c.status)
}
