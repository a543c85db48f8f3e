package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
	"github.com/corralhq/corral/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const generous = 30 * time.Second

// startDaemon runs a daemon on the real local backend in a temp dir and
// returns a client; cleanup kills what is left and stops it.
func startDaemon(t *testing.T) (*Client, Paths) {
	t.Helper()
	return startDaemonWith(t, nil)
}

// startDaemonWith is startDaemon with the Config changed by edit (if
// non-nil) before Run.
func startDaemonWith(t *testing.T, edit func(*Config)) (*Client, Paths) {
	t.Helper()
	dir, err := os.MkdirTemp("", "corrald")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	paths := Paths{Socket: filepath.Join(dir, "run", "s.sock"), StateDir: filepath.Join(dir, "state")}
	envDir := filepath.Join(dir, "env")
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	cfg := Config{
		Paths: paths,
		Open: func(ctx context.Context, target string) (env.Environment, error) {
			if target != "local" {
				return nil, fmt.Errorf("unknown backend %q", target)
			}
			return local.New(local.Options{StateDir: envDir, Logger: slog.New(slog.DiscardHandler)})
		},
		Logger:       slog.New(slog.DiscardHandler),
		DefaultGrace: time.Second,
		Ready:        func(Status) { close(ready) },
	}
	if edit != nil {
		edit(&cfg)
	}
	go func() { done <- Run(ctx, cfg) }()
	select {
	case <-ready:
	case err := <-done:
		require.Failf(t, "daemon ended before it was ready", "%v", err)
	case <-time.After(generous):
		require.Fail(t, "daemon not ready")
	}
	c := NewClient(paths.Socket)
	t.Cleanup(func() {
		kctx, kcancel := context.WithTimeout(context.Background(), generous)
		defer kcancel()
		c.KillAll(kctx, registry.KillAllOptions{Grace: 100 * time.Millisecond})
		c.CloseIdle()
		cancel()
		assert.NoError(t, <-done, "daemon")
	})
	return c, paths
}

func TestSocketPermissions(t *testing.T) {
	_, paths := startDaemon(t)
	fi, err := os.Stat(paths.Socket)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "socket mode")
	di, err := os.Stat(filepath.Dir(paths.Socket))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), di.Mode().Perm(), "socket dir mode")
}

func TestSecondDaemonRefused(t *testing.T) {
	_, paths := startDaemon(t)
	err := Run(context.Background(), Config{Paths: paths, Open: func(context.Context, string) (env.Environment, error) { return nil, errors.New("unused") }})
	require.ErrorIs(t, err, ErrAlreadyRunning, "second daemon")
}

func TestNoDaemon(t *testing.T) {
	c := NewClient(filepath.Join(t.TempDir(), "none.sock"))
	_, err := c.Status(context.Background())
	require.ErrorIs(t, err, ErrNoDaemon)
}

func TestLifecycle(t *testing.T) {
	c, _ := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()

	in, err := c.Start(ctx, registry.StartOptions{Command: "read line; echo got:$line; seq 1 3000; exit 5", Stdin: true, Labels: map[string]string{"t": "life"}})
	require.NoError(t, err)
	list, err := c.List(ctx, registry.ListOptions{Labels: map[string]string{"t": "life"}})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, in.ID, list[0].ID)
	var out bytes.Buffer
	followed := make(chan registry.Info, 1)
	go func() {
		fin, err := c.Follow(ctx, in.ID[:9], 0, func(ch OutputChunk) error {
			if ch.Offset != int64(out.Len()) {
				return fmt.Errorf("chunk at %d, have %d", ch.Offset, out.Len())
			}
			out.Write(ch.Data)
			return nil
		})
		assert.NoError(t, err, "follow")
		followed <- fin
	}()
	require.NoError(t, c.Send(ctx, in.ID, []byte("hello\n"), true))
	wr, err := c.Wait(ctx, in.ID, 0)
	require.NoError(t, err)
	require.Equal(t, registry.StateExited, wr.State)
	require.NotNil(t, wr.Status)
	require.Equal(t, 5, wr.Status.Code)
	fin := <-followed
	var want strings.Builder
	want.WriteString("got:hello\n")
	for i := 1; i <= 3000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	require.True(t, out.String() == want.String(), "followed %d bytes (want %d)", out.Len(), want.Len())
	require.Equal(t, registry.StateExited, fin.State, "the follow's final Info")
	_, err = c.RemoveID(ctx, in.ID, false)
	require.NoError(t, err)
	_, err = c.Get(ctx, in.ID)
	require.ErrorIs(t, err, registry.ErrNotFound, "after rm")
	_, err = c.Get(ctx, "zz")
	require.ErrorIs(t, err, registry.ErrInvalidID, "bad id")
}

func TestWaitTimeout(t *testing.T) {
	c, _ := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	in, err := c.Start(ctx, registry.StartOptions{Command: "sleep 6123.7"})
	require.NoError(t, err)
	wr, err := c.Wait(ctx, in.ID, 50*time.Millisecond)
	require.ErrorIs(t, err, registry.ErrWaitTimeout)
	require.Equal(t, registry.StateRunning, wr.State)
}

// TestConcurrentKills: two clients kill one process at once; exactly one
// reports the kill, the other that it had already exited.
func TestConcurrentKills(t *testing.T) {
	c, paths := startDaemon(t)
	c2 := NewClient(paths.Socket)
	defer c2.CloseIdle()
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	for range 5 {
		in, err := c.Start(ctx, registry.StartOptions{Command: "sleep 6124.1"})
		require.NoError(t, err)
		var wg sync.WaitGroup
		res := make([]registry.KillResult, 2)
		for i, cl := range []*Client{c, c2} {
			wg.Go(func() {
				r, err := cl.Kill(ctx, in.ID, registry.KillOptions{Grace: 2 * time.Second})
				assert.NoError(t, err, "kill")
				res[i] = r
			})
		}
		wg.Wait()
		require.NotEqual(t, res[0].AlreadyExited, res[1].AlreadyExited, "both kills report already_exited=%v", res[0].AlreadyExited)
		for _, r := range res {
			require.Equal(t, registry.StateKilled, r.State)
		}
	}
}

func TestEventsFollow(t *testing.T) {
	c, _ := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	ready := make(chan struct{})
	got := make(chan registry.Event, 10)
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	go c.FollowEvents(sctx, func() {
		select {
		case <-ready:
		default:
			close(ready)
		}
	}, func(ev registry.Event) error { got <- ev; return nil })
	<-ready
	in, err := c.Start(ctx, registry.StartOptions{Command: "true"})
	require.NoError(t, err)
	for {
		select {
		case ev := <-got:
			if ev.Type == registry.EventExited && ev.ID == in.ID {
				hist, err := c.History(ctx)
				require.NoError(t, err)
				require.NotEmpty(t, hist, "history")
				return
			}
		case <-ctx.Done():
			require.Fail(t, "no exited event")
		}
	}
}
