package daemon

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
	"github.com/corralhq/corral/registry"
)

// TestRunCancelHasOneKillPath: cancelling a client's Run ends its lease,
// and the daemon's Run, the one kill path of a run whose caller goes,
// kills the tree and reports the kill on the same stream. The client sends
// no kill of its own (it used to, beside the daemon's).
func TestRunCancelHasOneKillPath(t *testing.T) {
	dir, err := os.MkdirTemp("", "corral-run")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	reg, err := registry.New(registry.Config{
		Open: func(context.Context, string) (env.Environment, error) {
			return local.New(local.Options{StateDir: filepath.Join(dir, "env"), Logger: slog.New(slog.DiscardHandler)})
		},
		DefaultGrace: time.Second,
		Logger:       slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	srv := NewServer(reg, slog.New(slog.DiscardHandler), func() Status { return Status{} }, func(bool) {})
	var (
		mu    sync.Mutex
		calls []string
	)
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls = append(calls, r.Method+" "+r.URL.Path)
		mu.Unlock()
		srv.Handler().ServeHTTP(w, r)
	})}
	l, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	require.NoError(t, err)
	go hs.Serve(l)
	c := NewClient(filepath.Join(dir, "s.sock"))
	t.Cleanup(func() {
		c.CloseIdle()
		require.NoError(t, hs.Close())
		srv.Close()
		_, err := reg.KillAll(context.Background(), registry.KillAllOptions{Force: true})
		assert.NoError(t, err)
		require.NoError(t, reg.Close())
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var id string
	res, err := c.Run(ctx, registry.RunOptions{
		StartOptions: registry.StartOptions{Command: "trap '' TERM; echo up; sleep 60"},
		Grace:        200 * time.Millisecond,
		Started:      func(in registry.Info) { id = in.ID },
		Output: writerFunc(func(p []byte) (int, error) {
			if strings.Contains(string(p), "up") {
				cancel()
			}
			return len(p), nil
		}),
	})
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, id, res.ID)
	assert.Equal(t, registry.StateKilled, res.State, "cancelling Run kills the tree")
	require.NotNil(t, res.Kill, "the daemon's kill is reported on the run's stream")
	assert.True(t, res.Kill.Escalated, "TERM is ignored: SIGKILL after the grace: %+v", res.Kill)
	got, err := reg.Get(context.Background(), id)
	require.NoError(t, err)
	assert.False(t, got.TreeRunning, "nothing of the tree is left")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"POST /v1/run"}, calls, "one request: the run; no kill beside it")
}
