package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
	"github.com/corralhq/corral/internal/testing/proctest"
)

// newLocal returns a registry on the real local environment. Every process
// still running at the end is killed before the registry closes, since
// detached processes would otherwise outlive the test.
func newLocal(t *testing.T, mod func(*Config)) *Registry {
	t.Helper()
	if testing.Short() {
		t.Skip("real processes: skipped with -short")
	}
	stateDir := t.TempDir()
	cfg := Config{
		Open: func(ctx context.Context, target string) (env.Environment, error) {
			if target != "local" {
				return nil, fmt.Errorf("test: unknown target %q", target)
			}
			return local.New(local.Options{StateDir: stateDir, Logger: slog.New(slog.DiscardHandler)})
		},
		DefaultGrace: 2 * time.Second,
		Logger:       slog.New(slog.DiscardHandler),
	}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), generous)
		defer cancel()
		if _, err := r.KillAll(ctx, KillAllOptions{Grace: 100 * time.Millisecond}); err != nil {
			t.Errorf("cleanup KillAll: %v", err)
		}
		if err := r.Close(); err != nil {
			// Errors from env/local's own Close (it tears down cgroups of
			// processes that already ended) belong to that package's
			// tests; the registry's part is to pass them on, which it did.
			t.Logf("Close: %v", err)
		}
	})
	return r
}

// The process table is searched for exactly the processes a test started:
// a sleep with a duration unique to it (internal/testing/proctest).
var (
	marker   = proctest.Marker
	pidsWith = proctest.PIDsWith
	sleepers = proctest.Sleepers
)

func TestLocalRunExitCodeAndOutput(t *testing.T) {
	r := newLocal(t, nil)
	res, err := r.Run(ctxT(t), RunOptions{StartOptions: StartOptions{Command: "echo out; echo err >&2; exit 3"}})
	require.NoError(t, err)
	if res.State != StateExited || res.Status == nil || res.Status.Code != 3 || string(res.Output) != "out\nerr\n" {
		t.Fatalf("Run = %+v output %q", res.Info, res.Output)
	}
}

func TestLocalKillTree(t *testing.T) {
	r := newLocal(t, nil)
	m := marker()
	// A child, a grandchild in its own session, and a TERM-ignoring child.
	cmd := fmt.Sprintf("sleep %s & setsid sleep %s & sh -c 'trap \"\" TERM; sleep %s' & echo started; wait", m, m, m)
	in, err := r.Start(ctxT(t), StartOptions{Command: cmd})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(sleepers(m)) == 3 }, generous, poll, "waiting for the tree to start")
	res, err := r.Kill(ctxT(t), in.ID, KillOptions{Grace: 300 * time.Millisecond})
	if err != nil {
		t.Fatalf("Kill: %v (%+v)", err, res)
	}
	if res.State != StateKilled || len(res.Survivors) != 0 || res.Status == nil {
		t.Fatalf("Kill = %+v", res)
	}
	if left := pidsWith(m); len(left) != 0 {
		t.Fatalf("processes of the tree survived: %v", left)
	}
	res2, err := r.Kill(ctxT(t), in.ID, KillOptions{})
	if err != nil || !res2.AlreadyExited || res2.State != StateKilled {
		t.Fatalf("second Kill = %+v %v", res2, err)
	}
}

func TestLocalRunTimeoutEscalates(t *testing.T) {
	r := newLocal(t, nil)
	m := marker()
	res, err := r.Run(ctxT(t), RunOptions{
		StartOptions: StartOptions{Command: fmt.Sprintf("trap '' TERM; echo before; sleep %s", m)},
		Timeout:      300 * time.Millisecond,
		Grace:        200 * time.Millisecond,
	})
	require.NoError(t, err)
	if res.State != StateTimedOut || res.TimedOut != TimedOutTimeout || res.Status == nil || res.Status.Signal != env.SIGKILL ||
		string(res.Output) != "before\n" {
		t.Fatalf("Run = %+v output %q", res.Info, res.Output)
	}
	if left := pidsWith(m); len(left) != 0 {
		t.Fatalf("survivors: %v", left)
	}
}

func TestLocalIdleTimeout(t *testing.T) {
	r := newLocal(t, nil)
	m := marker()
	res, err := r.Run(ctxT(t), RunOptions{
		StartOptions: StartOptions{Command: fmt.Sprintf("for i in 1 2 3; do echo tick $i; sleep 0.05; done; sleep %s", m)},
		IdleTimeout:  500 * time.Millisecond,
		Timeout:      generous,
	})
	if err != nil || res.State != StateTimedOut || res.TimedOut != TimedOutIdle || !strings.Contains(string(res.Output), "tick 3") {
		t.Fatalf("Run = %+v %q %v", res.Info, res.Output, err)
	}
}

func TestLocalYieldThenWait(t *testing.T) {
	r := newLocal(t, nil)
	sub := r.Subscribe()
	defer sub.Close()
	ctx := ctxT(t)
	res, err := r.Run(ctx, RunOptions{
		StartOptions: StartOptions{Command: "echo first; read line; echo got $line", Stdin: true, Notify: true},
		YieldAfter:   200 * time.Millisecond,
	})
	if err != nil || !res.Yielded || res.State != StateRunning {
		t.Fatalf("Run = %+v %v", res, err)
	}
	require.NoError(t, r.Submit(ctx, res.ID, "hello"))
	// Not seen through Wait or Poll: the completion event is delivered.
	for {
		ev, err := sub.Next(ctx)
		require.NoError(t, err)
		if ev.Type == EventExited {
			if ev.ID != res.ID || ev.State != StateExited || !ev.Notify {
				t.Fatalf("%+v", ev)
			}
			break
		}
	}
	pr, err := r.Poll(ctx, res.ID, 0)
	if err != nil || string(pr.Output) != "first\ngot hello\n" || pr.State != StateExited {
		t.Fatalf("Poll = %+v %q %v", pr.Info, pr.Output, err)
	}
}

func TestLocalLargeOutputBounded(t *testing.T) {
	r := newLocal(t, func(c *Config) { c.BufferSize = 1 << 20; c.HeadSize = 64 << 10 })
	const n = 20 << 20
	res, err := r.Run(ctxT(t), RunOptions{StartOptions: StartOptions{Command: fmt.Sprintf("head -c %d /dev/zero", n)}})
	require.NoError(t, err)
	if res.OutputBytes != n || !res.Truncated || int64(len(res.Output))+res.OmittedBytes != n || len(res.Output) != 1<<20 {
		t.Fatalf("output %d bytes held, %d omitted, total %d", len(res.Output), res.OmittedBytes, res.OutputBytes)
	}
}

// A process flooding output never delays operations on another.
func TestLocalFloodIsolation(t *testing.T) {
	r := newLocal(t, nil)
	ctx := ctxT(t)
	flood, err := r.Start(ctx, StartOptions{Command: "yes corral-flood-test"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { g, _ := r.Get(t.Context(), flood.ID); return g.OutputBytes > 1<<20 },
		generous, poll, "waiting for 1 MiB of flood output")
	for range 5 {
		res, err := r.Run(ctx, RunOptions{StartOptions: StartOptions{Command: "echo quiet"}})
		if err != nil || string(res.Output) != "quiet\n" {
			t.Fatalf("Run during flood: %q %v", res.Output, err)
		}
		if _, err := r.Poll(ctx, flood.ID, 0); err != nil {
			t.Fatal(err)
		}
		listed(t, r, ListOptions{})
	}
	if res, err := r.Kill(ctx, flood.ID, KillOptions{}); err != nil || res.State != StateKilled {
		t.Fatalf("Kill flood = %+v %v", res, err)
	}
}

func TestLocalPTYAndWatch(t *testing.T) {
	r := newLocal(t, nil)
	sub := r.Subscribe()
	defer sub.Close()
	ctx := ctxT(t)
	res, err := r.Run(ctx, RunOptions{StartOptions: StartOptions{
		Command: `printf '\033[31mBUILD FAILED\033[0m\n'; printf 'ok\n'`,
		PTY:     &env.WindowSize{Rows: 24, Cols: 80},
		Watch:   []string{"BUILD FAILED"},
	}})
	if err != nil || res.State != StateExited || !res.PTY {
		t.Fatalf("Run = %+v %v", res.Info, err)
	}
	lr, err := r.Log(ctx, res.ID, LogOptions{Strip: true})
	if err != nil || strings.Join(lr.Lines, "|") != "BUILD FAILED|ok" {
		t.Fatalf("Log = %q %v (raw %q)", lr.Lines, err, res.Output)
	}
	for {
		ev, err := sub.Next(ctx)
		require.NoError(t, err)
		if ev.Type == EventWatchMatch {
			if ev.Line != "BUILD FAILED" {
				t.Fatalf("%+v", ev)
			}
			break
		}
	}
}

func TestLocalFailedStart(t *testing.T) {
	r := newLocal(t, nil)
	in, err := r.Start(ctxT(t), StartOptions{Command: "true", Dir: "/nonexistent/corral-test"})
	if !errors.Is(err, env.ErrDirNotFound) || in.State != StateFailed {
		t.Fatalf("Start = %+v %v", in, err)
	}
}
