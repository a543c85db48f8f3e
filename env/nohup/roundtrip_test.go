package nohup_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
	"github.com/corralhq/corral/env/nohup/nohuptest"
)

// newEnvOpts is newEnv with options; BaseDir, Shell and Name are set.
func newEnvOpts(t *testing.T, sh nohuptest.Shell, opts nohup.Options) (*nohup.Env, *nohuptest.Local) {
	t.Helper()
	tr := &nohuptest.Local{Shell: sh.Path, Env: sh.Env}
	opts.Name, opts.BaseDir, opts.Shell = "local-"+sh.Name, t.TempDir()+"/state", sh.Path
	e, err := nohup.New(tr, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	return e, tr
}

// TestShortCommandOneRoundTrip checks that a command ending within
// StartWait costs one round trip for Start, its whole output and Wait, and
// that later Outputs still read the log from the sandbox.
func TestShortCommandOneRoundTrip(t *testing.T) {
	forShells(t, func(t *testing.T, sh nohuptest.Shell) {
		// A long StartWait costs nothing: Start returns once the command
		// ended. It keeps a loaded machine from making this test flaky.
		e, tr := newEnvOpts(t, sh, nohup.Options{StartWait: 30 * time.Second})
		ctx := testCtx(t)
		before := tr.Execs()
		p := start(t, e, env.Spec{Command: "echo hello; echo world >&2; exit 3"})
		out := readAll(t, p, 0)
		st, err := p.Wait(ctx)
		require.Truef(t, err == nil && st == env.Exited(3), "Wait = %v, %v; want exit 3", st, err)
		require.Truef(t, string(out) == "hello\nworld\n", "output %q", out)
		if n := tr.Execs() - before; n != 1 {
			require.FailNow(t, fmt.Sprintf("Start, Output and Wait of a short command took %d round trips, want 1", n))
		}
		// The first report is used once; replays ask the sandbox.
		again := readAll(t, p, 6)
		require.Truef(t, string(again) == "world\n", "Output from 6 = %q", again)
		n := tr.Execs() - before
		require.Truef(t, n == 2, "a replay took %d round trips in all, want 2", n)
		require.NoError(t, p.Remove(ctx))
	})
}

// TestStartWaitDisabled checks that a negative StartWait returns from
// Start at once, and Wait and Output still find the end.
func TestStartWaitDisabled(t *testing.T) {
	e, tr := newEnvOpts(t, dash(), nohup.Options{StartWait: -1, LongPoll: -1})
	ctx := testCtx(t)
	// The command cannot end before its stdin closes, after Start.
	p := start(t, e, env.Spec{Command: "read x; echo hi; exit 4", Stdin: true})
	before := tr.Execs()
	require.NoError(t, p.CloseStdin(ctx))
	st, err := p.Wait(ctx)
	require.Truef(t, err == nil && st == env.Exited(4), "Wait = %v, %v", st, err)
	out := readAll(t, p, 0)
	require.Truef(t, string(out) == "hi\n", "output %q", out)
	require.True(t, tr.Execs()-before >= 2, "Wait and Output did not ask the sandbox: Start waited for the end although StartWait < 0")
}

// TestLongPollWaitsInSandbox checks that Wait and Output wait inside the
// sandbox: with client-side polling at 1ms, a process that stays blocked
// until its stdin closes still costs one round trip per waiter.
func TestLongPollWaitsInSandbox(t *testing.T) {
	forShells(t, func(t *testing.T, sh nohuptest.Shell) {
		e, tr := newEnvOpts(t, sh, nohup.Options{
			StartWait: -1, LongPoll: time.Minute,
			Poll: nohup.PollConfig{Min: time.Millisecond, Max: time.Millisecond},
		})
		ctx := testCtx(t)
		p := start(t, e, env.Spec{Command: "read x; echo got $x; exit 5", Stdin: true})
		before := tr.Execs()
		waited := make(chan error, 1)
		go func() {
			st, err := p.Wait(ctx)
			if err == nil && st != env.Exited(5) {
				err = errorf("Wait = %v, want exit 5", st)
			}
			waited <- err
		}()
		r, err := p.Output(ctx, 0)
		require.NoError(t, err)
		defer r.Close()
		read := make(chan []byte, 1)
		go func() {
			var all bytes.Buffer
			_, _ = all.ReadFrom(r)
			read <- all.Bytes()
		}()
		// Both polls are in flight once two scripts ran.
		require.Eventually(t, func() bool { return tr.Execs()-before >= 2 },
			testTimeout, time.Millisecond, "waiting for Wait and Output to poll")
		if _, err := p.Write(ctx, []byte("it\n")); err != nil {
			require.FailNow(t, fmt.Sprint(err))
		}
		require.NoError(t, <-waited)
		got := <-read
		require.Truef(t, string(got) == "got it\n", "output %q", got)
		// Wait: 1 long poll. Output: 1 or 2 (the output may come before
		// the exit). Write: 1. Client-side polling every 1ms would have
		// made many more.
		n := tr.Execs() - before
		require.Truef(t, n <= 4, "%d round trips while waiting, want at most 4: the polls did not wait inside the sandbox", n)
	})
}

// TestPollFinishesWithoutWrapper stops the wrapper: a poll that finds the
// command's zombie records its exit status itself, and the wrapper, once
// resumed, neither overwrites it nor calls the process lost.
func TestPollFinishesWithoutWrapper(t *testing.T) {
	forShells(t, func(t *testing.T, sh nohuptest.Shell) {
		e, _ := newEnvOpts(t, sh, nohup.Options{StartWait: -1})
		ctx := testCtx(t)
		p := start(t, e, env.Spec{Command: "read x; kill -TERM $$", Stdin: true})
		rd := wrapperOf(t, p)
		// The wrapper is a process this test started (through Start).
		require.NoError(t, syscall.Kill(rd.WPID, syscall.SIGSTOP))
		defer syscall.Kill(rd.WPID, syscall.SIGCONT)
		require.NoError(t, p.CloseStdin(ctx))
		st, err := p.Wait(ctx)
		require.Truef(t, err == nil && st == env.Signaled(env.SIGTERM), "Wait with the wrapper stopped = %v, %v; want SIGTERM", st, err)
		require.NoError(t, syscall.Kill(rd.WPID, syscall.SIGCONT))
		waitWrapperEnded(t, rd.WPID)
		b, err := os.ReadFile(rd.Dir + "/exit")
		require.Truef(t, err == nil && string(b) == "signal 15\n", "exit file after the wrapper ended = %q, %v; want \"signal 15\\n\"", b, err)
		if out, err := exec.Command("ls", rd.Dir).Output(); err != nil || bytes.Contains(out, []byte("tmp")) {
			require.FailNow(t, fmt.Sprintf("state dir holds %q, %v", out, err))
		}
		require.NoError(t, p.Remove(ctx))
	})
}

// TestHalfWrittenExitIsNotAnExit creates an empty exit file before the
// command ends, as a poll leaves it between its open and its write. The
// wrapper must not take it for a recorded exit: if it resumed the parent,
// the zombie would be reaped and, once that poll died without writing,
// the status would be lost for good.
func TestHalfWrittenExitIsNotAnExit(t *testing.T) {
	forShells(t, func(t *testing.T, sh nohuptest.Shell) {
		e, _ := newEnvOpts(t, sh, nohup.Options{StartWait: -1})
		ctx := testCtx(t)
		p := start(t, e, env.Spec{Command: "read x; exit 7", Stdin: true})
		rd := wrapperOf(t, p)
		require.NoError(t, os.WriteFile(rd.Dir+"/exit", nil, 0o600))
		require.NoError(t, p.CloseStdin(ctx))
		// No poll runs until the wrapper has ended: it alone sees the end.
		waitWrapperEnded(t, rd.WPID)
		if st, err := p.Wait(ctx); err != nil || st != env.Exited(7) {
			require.FailNow(t, fmt.Sprintf("Wait = %v, %v; want exit 7", st, err))
		}
		b, err := os.ReadFile(rd.Dir + "/exit")
		require.Truef(t, err == nil && string(b) == "code 7\n", "exit file = %q, %v; want \"code 7\\n\"", b, err)
		_ = p.Remove(ctx)
	})
}

// wrapperRef is what tests read from a process's Ref: its wrapper and
// state directory.
type wrapperRef struct {
	WPID int    `json:"wpid"`
	Dir  string `json:"dir"`
}

func wrapperOf(t *testing.T, p env.Process) wrapperRef {
	t.Helper()
	ref, _ := p.Ref()
	var rd wrapperRef
	err := json.Unmarshal(ref.Data, &rd)
	require.Truef(t, err == nil && rd.WPID > 0, "ref data %s: %v", ref.Data, err)
	return rd
}

// waitWrapperEnded waits until the wrapper wpid (a process this test
// started, through Start) is gone or a zombie.
func waitWrapperEnded(t *testing.T, wpid int) {
	t.Helper()
	require.Eventually(t, func() bool {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(wpid) + "/stat")
		return err != nil || bytes.Contains(stat[bytes.LastIndexByte(stat, ')'):], []byte(") Z"))
	}, testTimeout, 5*time.Millisecond, "waiting for the wrapper %d to end", wpid)
}

func errorf(format string, args ...any) error {
	return fmt.Errorf(format, args...)
}

// TestPollsAndWrapperAgree races the polls (Wait and Output, long polls
// and short ones) against the wrapper for the exit of instant commands:
// whoever records the exit, the status must be the command's. A poll that
// took a process being reaped for a zombie recorded "code 0".
func TestPollsAndWrapperAgree(t *testing.T) {
	forShells(t, func(t *testing.T, sh nohuptest.Shell) {
		e, _ := newEnvOpts(t, sh, nohup.Options{StartWait: -1, MaxLongPolls: 2})
		ctx := testCtx(t)
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range 15 {
					code := (g*15 + i) % 50
					p, err := e.Start(ctx, env.Spec{Command: fmt.Sprintf("exit %d", code)})
					if err != nil {
						assert.Fail(t, fmt.Sprint(err))
						return
					}
					r, err := p.Output(ctx, 0)
					if err != nil {
						assert.Fail(t, fmt.Sprint(err))
						return
					}
					go func() { _, _ = io.Copy(io.Discard, r) }()
					st, err := p.Wait(ctx)
					r.Close()
					assert.Truef(t, err == nil && st == env.Exited(code), "exit %d: Wait = %v, %v", code, st, err)
					_ = p.Remove(ctx)
				}
			})
		}
		wg.Wait()
	})
}

// TestAttachFinishedNeedsNoMoreRoundTrips checks that Attach keeps the exit
// status its state read found: a supervisor recovering after a restart
// learns at once which processes ended while it was down.
func TestAttachFinishedNeedsNoMoreRoundTrips(t *testing.T) {
	e, tr := newEnvOpts(t, dash(), nohup.Options{StartWait: 30 * time.Second})
	ctx := testCtx(t)
	p := start(t, e, env.Spec{Command: "exit 6", Detach: true})
	if st, err := p.Wait(ctx); err != nil || st != env.Exited(6) {
		require.FailNow(t, fmt.Sprintf("Wait = %v, %v; want exit 6", st, err))
	}
	ref, err := p.Ref()
	require.NoError(t, err)
	require.NoError(t, p.Release())
	before := tr.Execs()
	q, err := e.Attach(ctx, ref)
	require.NoError(t, err)
	if st, err := q.Wait(ctx); err != nil || st != env.Exited(6) {
		require.FailNow(t, fmt.Sprintf("Wait after Attach = %v, %v; want exit 6", st, err))
	}
	n := tr.Execs() - before
	require.Truef(t, n == 1, "Attach and Wait of a finished process took %d round trips, want 1", n)
}
