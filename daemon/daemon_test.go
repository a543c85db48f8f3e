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
	if err != nil {
		t.Fatal(err)
	}
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
		t.Fatalf("daemon: %v", err)
	case <-time.After(generous):
		t.Fatal("daemon not ready")
	}
	c := NewClient(paths.Socket)
	t.Cleanup(func() {
		kctx, kcancel := context.WithTimeout(context.Background(), generous)
		defer kcancel()
		c.KillAll(kctx, registry.KillAllOptions{Grace: 100 * time.Millisecond})
		c.CloseIdle()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	return c, paths
}

func TestSocketPermissions(t *testing.T) {
	_, paths := startDaemon(t)
	fi, err := os.Stat(paths.Socket)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v %v", fi.Mode(), err)
	}
	di, err := os.Stat(filepath.Dir(paths.Socket))
	if err != nil || di.Mode().Perm() != 0o700 {
		t.Fatalf("socket dir mode %v %v", di.Mode(), err)
	}
}

func TestSecondDaemonRefused(t *testing.T) {
	_, paths := startDaemon(t)
	err := Run(context.Background(), Config{Paths: paths, Open: func(context.Context, string) (env.Environment, error) { return nil, errors.New("unused") }})
	if !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second daemon: %v", err)
	}
}

func TestNoDaemon(t *testing.T) {
	c := NewClient(filepath.Join(t.TempDir(), "none.sock"))
	if _, err := c.Status(context.Background()); !errors.Is(err, ErrNoDaemon) {
		t.Fatalf("%v", err)
	}
}

func TestLifecycle(t *testing.T) {
	c, _ := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()

	in, err := c.Start(ctx, registry.StartOptions{Command: "read line; echo got:$line; seq 1 3000; exit 5", Stdin: true, Labels: map[string]string{"t": "life"}})
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.List(ctx, registry.ListOptions{Labels: map[string]string{"t": "life"}})
	if err != nil || len(list) != 1 || list[0].ID != in.ID {
		t.Fatalf("list %+v %v", list, err)
	}
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
		if err != nil {
			t.Errorf("follow: %v", err)
		}
		followed <- fin
	}()
	if err := c.Send(ctx, in.ID, []byte("hello\n"), true); err != nil {
		t.Fatal(err)
	}
	wr, err := c.Wait(ctx, in.ID, 0)
	if err != nil || wr.State != registry.StateExited || wr.Status.Code != 5 {
		t.Fatalf("wait %+v %v", wr, err)
	}
	fin := <-followed
	var want strings.Builder
	want.WriteString("got:hello\n")
	for i := 1; i <= 3000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if out.String() != want.String() || fin.State != registry.StateExited {
		t.Fatalf("followed %d bytes (want %d), final %s", out.Len(), want.Len(), fin.State)
	}
	if _, err := c.RemoveID(ctx, in.ID, false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, in.ID); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("after rm: %v", err)
	}
	if _, err := c.Get(ctx, "zz"); !errors.Is(err, registry.ErrInvalidID) {
		t.Fatalf("bad id: %v", err)
	}
}

func TestWaitTimeout(t *testing.T) {
	c, _ := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	in, err := c.Start(ctx, registry.StartOptions{Command: "sleep 6123.7"})
	if err != nil {
		t.Fatal(err)
	}
	wr, err := c.Wait(ctx, in.ID, 50*time.Millisecond)
	if !errors.Is(err, registry.ErrWaitTimeout) || wr.State != registry.StateRunning {
		t.Fatalf("%+v %v", wr, err)
	}
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
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		res := make([]registry.KillResult, 2)
		for i, cl := range []*Client{c, c2} {
			wg.Go(func() {
				r, err := cl.Kill(ctx, in.ID, registry.KillOptions{Grace: 2 * time.Second})
				if err != nil {
					t.Errorf("kill: %v", err)
				}
				res[i] = r
			})
		}
		wg.Wait()
		if res[0].AlreadyExited == res[1].AlreadyExited {
			t.Fatalf("both kills report already_exited=%v", res[0].AlreadyExited)
		}
		for _, r := range res {
			if r.State != registry.StateKilled {
				t.Fatalf("state %s", r.State)
			}
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
	if err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case ev := <-got:
			if ev.Type == registry.EventExited && ev.ID == in.ID {
				hist, err := c.History(ctx)
				if err != nil || len(hist) == 0 {
					t.Fatalf("history %v %v", hist, err)
				}
				return
			}
		case <-ctx.Done():
			t.Fatal("no exited event")
		}
	}
}
