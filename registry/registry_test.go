package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// generous bounds every wait on a condition; tests never assert timing.
const generous = 20 * time.Second

// poll is how often require.Eventually looks at a condition again.
const poll = 2 * time.Millisecond

type fixture struct {
	t   *testing.T
	r   *Registry
	env *envtest.Fake
}

// newFakeEnv returns the scripted Environment of the registry's unit
// tests: it offers stdin, PTYs and re-attach, so Start detaches.
func newFakeEnv() *envtest.Fake {
	return &envtest.Fake{Caps: env.Capabilities{Stdin: true, PTY: true, Reattach: true, TreeKill: "fake"}}
}

// onStart scripts every process started from now on (nil: no script).
func (f *fixture) onStart(script func(*envtest.FakeProcess)) {
	if script == nil {
		f.env.OnStart = nil
		return
	}
	f.env.OnStart = func(p *envtest.FakeProcess) error { script(p); return nil }
}

// isClosed reports whether ch is closed, without blocking.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func newFixture(t *testing.T, mod func(*Config)) *fixture {
	t.Helper()
	fe := newFakeEnv()
	f := &fixture{t: t, env: fe}
	cfg := Config{
		Open: func(ctx context.Context, target string) (env.Environment, error) {
			if target != "local" && target != "fake" {
				return nil, fmt.Errorf("unknown target %q", target)
			}
			return fe, nil
		},
		DefaultGrace: 50 * time.Millisecond,
		Logger:       slog.New(slog.DiscardHandler),
	}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	require.NoError(t, err)
	f.r = r
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return f
}

// listed is List in tests: in process it cannot fail.
func listed(t testing.TB, r *Registry, opts ListOptions) []Info {
	t.Helper()
	l, err := r.List(t.Context(), opts)
	require.NoError(t, err)
	return l
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	t.Cleanup(cancel)
	return ctx
}

func (f *fixture) start(opts StartOptions) (Info, *envtest.FakeProcess) {
	f.t.Helper()
	if opts.Command == "" {
		opts.Command = "fake command"
	}
	in, err := f.r.Start(ctxT(f.t), opts)
	if err != nil {
		f.t.Fatalf("Start: %v", err)
	}
	return in, f.env.Last()
}

func TestNewRequiresOpen(t *testing.T) {
	if _, err := New(Config{}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("New without Open: %v", err)
	}
	if _, err := New(Config{Open: func(context.Context, string) (env.Environment, error) { return nil, nil }, BufferSize: 10, HeadSize: 10}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("HeadSize >= BufferSize: %v", err)
	}
}

func TestIDs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		in, _ := f.start(StartOptions{})
		if !ValidID(in.ID) || len(in.ID) != len("proc_")+12 {
			t.Fatalf("ID %q is not proc_ + 12 hex", in.ID)
		}
		for _, arg := range []string{in.ID, in.ID[:9], strings.TrimPrefix(in.ID, "proc_")[:4], strings.TrimPrefix(in.ID, "proc_")} {
			got, err := f.r.Resolve(arg)
			if err != nil || got != in.ID {
				t.Errorf("Resolve(%q) = %q, %v; want %q", arg, got, err, in.ID)
			}
		}
		for _, bad := range []string{"", "proc_", "abc", "proc_ABCDEF012345", "proc_0123456789abc", "xyz1234", "proc_12 4", "../etc"} {
			_, err := f.r.Get(t.Context(), bad)
			if !errors.Is(err, ErrInvalidID) || !strings.Contains(err.Error(), "12 lowercase hex digits") {
				t.Errorf("Get(%q) = %v, want ErrInvalidID naming the expected form", bad, err)
			}
		}
		// Every entry point validates.
		ctx := ctxT(t)
		checks := map[string]error{}
		_, checks["Poll"] = f.r.Poll(ctx, "nope", 0)
		_, checks["Log"] = f.r.Log(ctx, "nope", LogOptions{})
		_, checks["Wait"] = f.r.Wait(ctx, "nope", time.Second)
		_, checks["Kill"] = f.r.Kill(ctx, "nope", KillOptions{})
		checks["Write"] = f.r.Write(ctx, "nope", []byte("x"))
		checks["Submit"] = f.r.Submit(ctx, "nope", "x")
		checks["CloseStdin"] = f.r.CloseStdin(ctx, "nope")
		checks["Remove"] = f.r.Remove(ctx, "nope")
		for name, err := range checks {
			if !errors.Is(err, ErrInvalidID) {
				t.Errorf("%s with a bad ID: %v, want ErrInvalidID", name, err)
			}
		}
		if _, err := f.r.Get(t.Context(), "proc_000000000000"); !errors.Is(err, ErrNotFound) || strings.Contains(err.Error(), "corral ") {
			t.Errorf("unknown ID: %v, want ErrNotFound, in the registry's words (the front ends name their own commands)", err)
		}
	})
}

func TestAmbiguousPrefix(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		// Insert two processes whose IDs share a prefix.
		a := &proc{id: "proc_abcd00000001", procLife: procLife{done: make(chan struct{}), started: make(chan struct{})}, procOutput: procOutput{buf: newBuffer(16, 4)}}
		b := &proc{id: "proc_abcd00000002", procLife: procLife{done: make(chan struct{}), started: make(chan struct{})}, procOutput: procOutput{buf: newBuffer(16, 4)}}
		f.r.mu.Lock()
		f.r.procs[a.id], f.r.procs[b.id] = a, b
		f.r.mu.Unlock()
		_, err := f.r.Resolve("abcd")
		var amb *AmbiguousError
		if !errors.Is(err, ErrAmbiguous) || !errors.As(err, &amb) || len(amb.Candidates) != 2 || amb.Candidates[0] != a.id {
			t.Fatalf("Resolve(abcd) = %v", err)
		}
		if got, err := f.r.Resolve("proc_abcd00000002"); err != nil || got != b.id {
			t.Fatalf("full ID: %q %v", got, err)
		}
		if got, err := f.r.Resolve("abcd00000001"); err != nil || got != a.id {
			t.Fatalf("unique prefix: %q %v", got, err)
		}
	})
}

func TestLifecycleAndPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		sub := f.r.Subscribe()
		defer sub.Close()
		in, fp := f.start(StartOptions{Labels: map[string]string{"job": "a"}})
		if in.State != StateRunning || in.PID != fp.PID() || in.StartedAt.IsZero() || !in.Detached {
			t.Fatalf("after Start: %+v", in)
		}
		// The backend-private Ref reaches a caller only when asked for.
		if in.Ref != nil {
			t.Fatalf("Start returned the backend-private Ref %+v", in.Ref)
		}
		if l := listed(t, f.r, ListOptions{WithRef: true}); len(l) != 1 || l[0].Ref == nil {
			t.Fatalf("List with WithRef: %+v", l)
		}
		if l := listed(t, f.r, ListOptions{}); len(l) != 1 || l[0].Ref != nil {
			t.Fatalf("List without WithRef: %+v", l)
		}
		if fp.Spec().Tag != in.ID || !fp.Spec().Detach {
			t.Fatalf("spec = %+v", fp.Spec())
		}
		fp.WriteOutput("hello\n")
		ctx := ctxT(t)
		var pr PollResult
		require.Eventually(t, func() bool {
			pr, _ = f.r.Poll(ctx, in.ID, 0)
			return string(pr.Output) == "hello\n"
		}, generous, poll, "waiting for Poll to return the output")
		if pr.Next != 6 || pr.State != StateRunning {
			t.Fatalf("poll: %+v", pr)
		}
		fp.WriteOutput("world\n")
		fp.Exit(env.Exited(3))
		got, err := f.r.Wait(ctx, in.ID, 0)
		if err != nil || got.State != StateExited || got.Status == nil || got.Status.Code != 3 || got.EndedAt.IsZero() {
			t.Fatalf("Wait = %+v, %v", got, err)
		}
		pr, _ = f.r.Poll(ctx, in.ID, pr.Next)
		if string(pr.Output) != "world\n" || pr.OutputBytes != 12 {
			t.Fatalf("second poll: %q %+v", pr.Output, pr.Info)
		}
		ev, err := sub.Next(ctx)
		if err != nil || ev.Type != EventStarted || ev.ID != in.ID {
			t.Fatalf("first event %+v %v", ev, err)
		}
	})
}

func TestLostAndFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		in, fp := f.start(StartOptions{})
		fp.Lose(fmt.Errorf("fake: %w", env.ErrSandboxGone))
		got, err := f.r.Wait(ctxT(t), in.ID, 0)
		if err != nil || got.State != StateLost || got.Status != nil || !strings.Contains(got.Reason, "sandbox is gone") {
			t.Fatalf("lost: %+v %v", got, err)
		}

		// A sandbox found gone is closed and opened again on next use
		// (see envGone): the failed start gets a fixture of its own.
		f = newFixture(t, nil)
		f.env.OnStart = func(*envtest.FakeProcess) error { return fmt.Errorf("fake: %w", env.ErrDirNotFound) }
		failed, err := f.r.Start(ctxT(t), StartOptions{Command: "x", Dir: "/nonexistent"})
		if !errors.Is(err, env.ErrDirNotFound) || failed.State != StateFailed || failed.ID == "" || failed.Reason == "" {
			t.Fatalf("failed start: %+v %v", failed, err)
		}
		if got, err := f.r.Get(t.Context(), failed.ID); err != nil || got.State != StateFailed {
			t.Fatalf("failed process not tracked: %+v %v", got, err)
		}

		_, err = f.r.Start(ctxT(t), StartOptions{Command: "x", Backend: "nowhere"})
		if err == nil || !strings.Contains(err.Error(), "nowhere") {
			t.Fatalf("unknown backend: %v", err)
		}
		if _, err := f.r.Start(ctxT(t), StartOptions{Command: "  "}); !errors.Is(err, env.ErrInvalidSpec) {
			t.Fatalf("empty command: %v", err)
		}
		if _, err := f.r.Start(ctxT(t), StartOptions{Command: "x", WatchRegex: []string{"("}}); !errors.Is(err, ErrInvalidOptions) {
			t.Fatalf("bad regex: %v", err)
		}
	})
}

func TestStdin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		ctx := ctxT(t)
		in, fp := f.start(StartOptions{Stdin: true})
		require.NoError(t, f.r.Write(ctx, in.ID, []byte("ab")))
		require.NoError(t, f.r.Submit(ctx, in.ID, "line"))
		require.NoError(t, f.r.CloseStdin(ctx, in.ID))
		require.ErrorIs(t, f.r.Write(ctx, in.ID, []byte("late")), env.ErrStdinClosed, "write after close")
		if string(fp.Stdin()) != "abline\n" {
			t.Fatalf("stdin got %q", fp.Stdin())
		}
		pty, pfp := f.start(StartOptions{PTY: &env.WindowSize{Rows: 24, Cols: 80}})
		if pty.Detached {
			t.Fatal("a PTY process was started detached")
		}
		if err := f.r.Submit(ctx, pty.ID, "y"); err != nil || string(pfp.Stdin()) != "y\r" {
			t.Fatalf("PTY submit: %q %v", pfp.Stdin(), err)
		}
		fp.Exit(env.Exited(0))
		f.r.Wait(ctx, in.ID, 0)
		require.ErrorIs(t, f.r.Write(ctx, in.ID, []byte("x")), ErrNotRunning, "write after exit")
	})
}

func TestWaitTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		in, _ := f.start(StartOptions{})
		begin := time.Now()
		got, err := f.r.Wait(ctxT(t), in.ID, 10*time.Millisecond)
		assert.Equal(t, 10*time.Millisecond, time.Since(begin), "bubble time")
		if !errors.Is(err, ErrWaitTimeout) || got.State != StateRunning {
			t.Fatalf("Wait = %+v %v", got, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := f.r.Wait(ctx, in.ID, 0); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Wait: %v", err)
		}
	})
}

func TestListAndKillAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		a, _ := f.start(StartOptions{Labels: map[string]string{"team": "x"}})
		b, _ := f.start(StartOptions{Labels: map[string]string{"team": "y"}})
		c, cp := f.start(StartOptions{Labels: map[string]string{"team": "x"}})
		cp.Exit(env.Exited(0))
		f.r.Wait(ctxT(t), c.ID, 0)

		ids := func(infos []Info) string {
			var s []string
			for _, in := range infos {
				s = append(s, in.ID)
			}
			return strings.Join(s, ",")
		}
		if got := ids(listed(t, f.r, ListOptions{})); got != a.ID+","+b.ID {
			t.Fatalf("running: %s", got)
		}
		if got := ids(listed(t, f.r, ListOptions{All: true})); got != a.ID+","+b.ID+","+c.ID {
			t.Fatalf("all: %s", got)
		}
		if got := ids(listed(t, f.r, ListOptions{All: true, Labels: map[string]string{"team": "x"}})); got != a.ID+","+c.ID {
			t.Fatalf("labels: %s", got)
		}
		if got := ids(listed(t, f.r, ListOptions{States: []State{StateExited}})); got != c.ID {
			t.Fatalf("states: %s", got)
		}
		if got := ids(listed(t, f.r, ListOptions{Backend: "other"})); got != "" {
			t.Fatalf("backend: %s", got)
		}
		res, err := f.r.KillAll(ctxT(t), KillAllOptions{Labels: map[string]string{"team": "x"}})
		if err != nil || len(res) != 1 || res[0].ID != a.ID || res[0].State != StateKilled {
			t.Fatalf("KillAll = %+v %v", res, err)
		}
		if got, _ := f.r.Get(t.Context(), b.ID); got.State != StateRunning {
			t.Fatal("KillAll hit a process without the label")
		}
	})
}

func TestRemove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		in, fp := f.start(StartOptions{})
		require.ErrorIs(t, f.r.Remove(ctxT(t), in.ID), ErrRunning, "remove running")
		fp.Exit(env.Exited(0))
		f.r.Wait(ctxT(t), in.ID, 0)
		require.NoError(t, f.r.Remove(ctxT(t), in.ID))
		if !fp.Removed() {
			t.Fatal("the environment's process state was not removed")
		}
		if _, err := f.r.Get(t.Context(), in.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("after Remove: %v", err)
		}
	})
}

func TestMaxProcesses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, func(c *Config) { c.MaxProcesses = 3 })
		var infos []Info
		var fps []*envtest.FakeProcess
		for range 3 {
			in, fp := f.start(StartOptions{})
			infos, fps = append(infos, in), append(fps, fp)
		}
		if _, err := f.r.Start(ctxT(t), StartOptions{Command: "x"}); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "running") {
			t.Fatalf("full of running processes: %v", err)
		}
		// Finish two; the one that finished first is pruned first. A process
		// is never pruned while its tree may still run: wait for the
		// registry's look at the tree after each exit, so both are candidates.
		fps[2].Exit(env.Exited(0))
		_, err := f.r.WaitTree(ctxT(t), infos[2].ID, 0)
		require.NoError(t, err)
		time.Sleep(time.Second)
		synctest.Wait()
		fps[0].Exit(env.Exited(0))
		_, err = f.r.WaitTree(ctxT(t), infos[0].ID, 0)
		require.NoError(t, err)
		f.start(StartOptions{})
		if _, err := f.r.Get(t.Context(), infos[2].ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("oldest finished not pruned: %v", err)
		}
		if _, err := f.r.Get(t.Context(), infos[0].ID); err != nil {
			t.Fatalf("newer finished pruned: %v", err)
		}
		synctest.Wait() // the removal runs in the background
		if !fps[2].Removed() {
			t.Fatal("pruned process's state not removed")
		}
	})
}

func TestFinishedTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, func(c *Config) { c.FinishedTTL = time.Hour })
		in, fp := f.start(StartOptions{})
		run, _ := f.start(StartOptions{})
		fp.Exit(env.Exited(0))
		f.r.Wait(ctxT(t), in.ID, 0)
		// A process is never pruned while its tree may still run: wait for
		// the registry's look at the tree after the exit.
		_, err := f.r.WaitTree(ctxT(t), in.ID, 0)
		require.NoError(t, err)
		time.Sleep(59 * time.Minute)
		synctest.Wait()
		if _, err := f.r.Get(t.Context(), in.ID); err != nil {
			t.Fatalf("pruned early: %v", err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if _, err := f.r.Get(t.Context(), in.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("not pruned after TTL: %v", err)
		}
		if _, err := f.r.Get(t.Context(), run.ID); err != nil {
			t.Fatalf("running process pruned: %v", err)
		}
	})
}

// The janitor prunes without any call into the registry.
func TestJanitor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, func(c *Config) { c.FinishedTTL = time.Millisecond })
		in, fp := f.start(StartOptions{})
		fp.Exit(env.Exited(0))
		f.r.Wait(ctxT(t), in.ID, 0)
		require.Eventually(t, func() bool {
			f.r.mu.Lock()
			defer f.r.mu.Unlock()
			_, ok := f.r.procs[in.ID]
			return !ok
		}, generous, poll, "waiting for the janitor to prune the finished process")
	})
}

func TestLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, func(c *Config) { c.BufferSize = 64; c.HeadSize = 16 })
		in, fp := f.start(StartOptions{})
		fp.WriteOutput("\x1b[31mred\x1b[0m\nline2\n")
		ctx := ctxT(t)
		require.Eventually(t, func() bool { g, _ := f.r.Get(t.Context(), in.ID); return g.OutputBytes > 0 },
			generous, poll, "waiting for the output")
		lr, err := f.r.Log(ctx, in.ID, LogOptions{Strip: true})
		if err != nil || strings.Join(lr.Lines, "|") != "red|line2" || lr.Offset != 1 || lr.TotalLines != 2 {
			t.Fatalf("Log = %+v %v", lr, err)
		}
		lr, _ = f.r.Log(ctx, in.ID, LogOptions{})
		if lr.Lines[0] != "\x1b[31mred\x1b[0m" {
			t.Fatalf("unstripped: %q", lr.Lines[0])
		}
		for i := range 20 {
			fp.WriteOutput(fmt.Sprintf("n%02d\n", i))
		}
		fp.Exit(env.Exited(0))
		f.r.Wait(ctx, in.ID, 0)
		lr, _ = f.r.Log(ctx, in.ID, LogOptions{Limit: 3})
		if strings.Join(lr.Lines, "|") != "n17|n18|n19" || lr.OmittedBytes == 0 {
			t.Fatalf("tail: %+v", lr)
		}
		lr, _ = f.r.Log(ctx, in.ID, LogOptions{Offset: 1, Limit: 4})
		if !strings.HasPrefix(lr.Lines[len(lr.Lines)-1], "[… ") && !strings.Contains(strings.Join(lr.Lines, "|"), "omitted") {
			t.Fatalf("head with marker: %q", lr.Lines)
		}
		if _, err := f.r.Log(ctx, in.ID, LogOptions{Offset: -1}); !errors.Is(err, ErrInvalidOptions) {
			t.Fatalf("negative offset: %v", err)
		}
	})
}

func TestRunCompletes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		f.onStart(func(p *envtest.FakeProcess) {
			go func() {
				p.WriteOutput("out\n")
				p.Exit(env.Exited(0))
			}()
		})
		var live bytes.Buffer
		res, err := f.r.Run(ctxT(t), RunOptions{StartOptions: StartOptions{Command: "x"}, Output: &live})
		if err != nil || res.State != StateExited || string(res.Output) != "out\n" || live.String() != "out\n" || res.Yielded {
			t.Fatalf("Run = %+v %v (live %q)", res, err, live.String())
		}
		if f.env.Last().Spec().Detach {
			t.Fatal("a foreground Run was detached")
		}
	})
}

func TestRunTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		f.onStart(func(p *envtest.FakeProcess) { p.WriteOutput("partial") })
		begin := time.Now()
		res, err := f.r.Run(ctxT(t), RunOptions{StartOptions: StartOptions{Command: "x"}, Timeout: 20 * time.Millisecond})
		assert.Equal(t, 20*time.Millisecond, time.Since(begin), "the TERM goes out at the timeout and the process ends of it (bubble time)")
		if err != nil || res.State != StateTimedOut || res.TimedOut != TimedOutTimeout || string(res.Output) != "partial" ||
			res.Status == nil || res.Status.Signal != env.SIGTERM {
			t.Fatalf("Run = %+v %v", res, err)
		}
	})
}

func TestRunIdleTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		defer wg.Wait()
		defer close(stop)
		f.onStart(func(p *envtest.FakeProcess) {
			wg.Go(func() {
				// Output for a while, then silence.
				for i := range 5 {
					p.WriteOutput(fmt.Sprintf("tick %d\n", i))
					select {
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond):
					}
				}
			})
		})
		begin := time.Now()
		res, err := f.r.Run(ctxT(t), RunOptions{StartOptions: StartOptions{Command: "x"}, IdleTimeout: 100 * time.Millisecond, Timeout: generous})
		assert.Equal(t, 120*time.Millisecond, time.Since(begin), "the last tick at 20 ms, then 100 ms of silence (bubble time)")
		if err != nil || res.State != StateTimedOut || res.TimedOut != TimedOutIdle {
			t.Fatalf("Run = %+v %v", res, err)
		}
		if !strings.Contains(string(res.Output), "tick 4") {
			t.Fatalf("output %q", res.Output)
		}
	})
}

func TestRunYield(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		var live bytes.Buffer
		res, err := f.r.Run(ctxT(t), RunOptions{StartOptions: StartOptions{Command: "x"}, YieldAfter: 10 * time.Millisecond, Timeout: 20 * time.Millisecond, Output: &live})
		if err != nil || !res.Yielded || res.State != StateRunning || !ValidID(res.ID) {
			t.Fatalf("Run = %+v %v", res, err)
		}
		fp := f.env.Last()
		if !fp.Spec().Detach {
			t.Fatal("a yielding Run was not started like Start (detached)")
		}
		fp.WriteOutput("after yield")
		got, err := f.r.Wait(ctxT(t), res.ID, 50*time.Millisecond)
		if !errors.Is(err, ErrWaitTimeout) || got.State != StateRunning {
			t.Fatalf("the Timeout applied after yielding: %+v %v", got, err)
		}
		if live.Len() != 0 {
			t.Fatalf("live output written after Run returned: %q", live.String())
		}
		fp.Exit(env.Exited(0))
		if got, _ := f.r.Wait(ctxT(t), res.ID, 0); got.State != StateExited {
			t.Fatalf("%+v", got)
		}
	})
}

func TestRunContextCancelKills(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		ctx, cancel := context.WithCancel(context.Background())
		f.onStart(func(*envtest.FakeProcess) { go cancel() })
		res, err := f.r.Run(ctx, RunOptions{StartOptions: StartOptions{Command: "x"}})
		if !errors.Is(err, context.Canceled) || res.State != StateKilled {
			t.Fatalf("Run = %+v %v", res, err)
		}
		if s := f.env.Last().Signals(); len(s) == 0 || s[0] != env.SIGTERM {
			t.Fatalf("signals %v", s)
		}
	})
}

func TestSubscriptionSkipsSeenCompletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		sub := f.r.Subscribe()
		defer sub.Close()
		ctx := ctxT(t)
		seen, fp1 := f.start(StartOptions{})
		unseen, fp2 := f.start(StartOptions{Notify: true})
		fp1.Exit(env.Exited(0))
		if _, err := f.r.Wait(ctx, seen.ID, 0); err != nil {
			t.Fatal(err)
		}
		fp2.Exit(env.Exited(1))
		var got []string
		for len(got) < 3 {
			ev, err := sub.Next(ctx)
			require.NoError(t, err)
			got = append(got, string(ev.Type)+":"+ev.ID)
			if ev.Type == EventExited && (!ev.Notify || ev.Status == nil || ev.Status.Code != 1 || ev.State != StateExited) {
				t.Fatalf("exited event %+v", ev)
			}
		}
		want := []string{"started:" + seen.ID, "started:" + unseen.ID, "exited:" + unseen.ID}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("events %v, want %v", got, want)
		}
	})
}

func TestSubscriptionBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, func(c *Config) { c.SubscriptionBuffer = 2 })
		sub := f.r.Subscribe()
		defer sub.Close()
		for range 5 {
			f.start(StartOptions{})
		}
		ev, err := sub.Next(ctxT(t))
		if err != nil || ev.Dropped != 3 || sub.Dropped() != 3 || ev.Seq != 4 {
			t.Fatalf("event %+v %v, dropped %d", ev, err, sub.Dropped())
		}
		ev, _ = sub.Next(ctxT(t))
		if ev.Seq != 5 || ev.Dropped != 0 {
			t.Fatalf("event %+v", ev)
		}
	})
}

func TestSubscriptionClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		sub := f.r.Subscribe()
		done := make(chan error)
		go func() { _, err := sub.Next(context.Background()); done <- err }()
		f.r.Close()
		require.ErrorIs(t, <-done, ErrClosed, "Next after Close")
		if _, err := f.r.Get(t.Context(), "proc_000000000000"); !errors.Is(err, ErrClosed) {
			t.Fatalf("Get after Close: %v", err)
		}
		if _, err := f.r.Start(context.Background(), StartOptions{Command: "x"}); !errors.Is(err, ErrClosed) {
			t.Fatalf("Start after Close: %v", err)
		}
	})
}

func TestCloseClosesEnvironments(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		_, fp := f.start(StartOptions{PTY: &env.WindowSize{Rows: 1, Cols: 1}}) // not detached
		require.NoError(t, f.r.Close())
		if !f.env.Closed() || !isClosed(fp.Exited()) {
			t.Fatal("Close did not close the environment")
		}
	})
}

func TestOpenOncePerTarget(t *testing.T) {
	var mu sync.Mutex
	opens := map[string]int{}
	fe := newFakeEnv()
	r, err := New(Config{Logger: slog.New(slog.DiscardHandler), Open: func(ctx context.Context, target string) (env.Environment, error) {
		mu.Lock()
		defer mu.Unlock()
		opens[target]++
		if target == "bad" {
			return nil, errors.New("cannot open")
		}
		return fe, nil
	}})
	require.NoError(t, err)
	defer r.Close()
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { r.Start(ctxT(t), StartOptions{Command: "x"}) })
	}
	wg.Wait()
	r.Start(ctxT(t), StartOptions{Command: "x", Backend: "bad"})
	r.Start(ctxT(t), StartOptions{Command: "x", Backend: "bad"})
	if opens["local"] != 1 || opens["bad"] != 2 {
		t.Fatalf("opens %v: want local once, a failing target retried", opens)
	}
	_ = io.Discard
}

// Info is plain data: it survives a JSON round trip unchanged, Ref
// included, as front ends that pass it on need.
func TestInfoJSONRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		in, fp := f.start(StartOptions{Labels: map[string]string{"k": "v"}})
		fp.WriteOutput("x")
		fp.Exit(env.Signaled(env.SIGTERM))
		_, err := f.r.Wait(ctxT(t), in.ID, 0)
		require.NoError(t, err)
		list := listed(t, f.r, ListOptions{All: true, WithRef: true})
		require.Len(t, list, 1)
		got := list[0]
		b, err := json.Marshal(got)
		require.NoError(t, err)
		var back Info
		require.NoError(t, json.Unmarshal(b, &back))
		b2, _ := json.Marshal(back)
		if string(b) != string(b2) || back.Ref == nil || back.Status == nil || back.Status.Signal != env.SIGTERM ||
			back.Labels["k"] != "v" || !back.EndedAt.Equal(got.EndedAt) {
			t.Fatalf("round trip:\n%s\n%s", b, b2)
		}
	})
}

func TestPollCursorFellOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, func(c *Config) { c.BufferSize = 32; c.HeadSize = 8 })
		in, fp := f.start(StartOptions{})
		fp.WriteOutput(strings.Repeat("a", 8) + strings.Repeat("b", 40) + strings.Repeat("c", 24))
		fp.Exit(env.Exited(0))
		f.r.Wait(ctxT(t), in.ID, 0)
		pr, err := f.r.Poll(ctxT(t), in.ID, 10)
		if err != nil || pr.OmittedBytes != 38 || pr.OmittedAt != 0 || string(pr.Output) != strings.Repeat("c", 24) || pr.Next != 72 {
			t.Fatalf("Poll = %q omitted %d at %d next %d, %v", pr.Output, pr.OmittedBytes, pr.OmittedAt, pr.Next, err)
		}
		pr, _ = f.r.Poll(ctxT(t), in.ID, 0)
		if pr.OmittedBytes != 40 || pr.OmittedAt != 8 || string(pr.Output) != strings.Repeat("a", 8)+strings.Repeat("c", 24) {
			t.Fatalf("Poll from 0 = %q omitted %d at %d", pr.Output, pr.OmittedBytes, pr.OmittedAt)
		}
	})
}
