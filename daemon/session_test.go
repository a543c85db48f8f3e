package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
	"github.com/corralhq/corral/internal/testing/proctest"
	"github.com/corralhq/corral/registry"
)

// rawSession opens a session on a connection of its own, as a front end
// would, and returns the session's ID and the connection: closing it is
// what the kernel does when the front end dies.
func rawSession(t *testing.T, socket string) (string, net.Conn) {
	t.Helper()
	conn, err := net.Dial("unix", socket)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	req, err := http.NewRequest(http.MethodPost, "http://corral"+APIVersion+"/sessions", bytes.NewReader([]byte("{}")))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	require.NoError(t, req.Write(conn))
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var info SessionInfo
			require.NoError(t, json.Unmarshal([]byte(data), &info))
			return info.ID, conn
		}
	}
	require.Fail(t, "no session event")
	return "", nil
}

func awaitEnd(t *testing.T, c *Client, id string) registry.Info {
	t.Helper()
	var got registry.Info
	require.Eventually(t, func() bool {
		var err error
		got, err = c.Get(context.Background(), id)
		return err == nil && got.State.Final() && !got.TreeRunning
	}, generous, 10*time.Millisecond, "waiting for %s to end", id)
	return got
}

// A front end that vanishes without a word (killed with -9: its socket
// just closes) has its session's processes killed by the daemon, whole
// trees, and the reason recorded; what it started outside the session
// (MCP's persist) runs on.
func TestSessionLeaseEndsWithTheConnection(t *testing.T) {
	c, paths := startDaemon(t)
	id, conn := rawSession(t, paths.Socket)
	m, kept := proctest.Marker(), proctest.Marker()
	proctest.KillOnCleanup(t, m)
	proctest.KillOnCleanup(t, kept)
	ctx := context.Background()
	member, err := c.Start(ctx, registry.StartOptions{Command: "sleep " + m + " & sleep " + m + "; wait", Session: id})
	require.NoError(t, err)
	persisted, err := c.Start(ctx, registry.StartOptions{Command: "sleep " + kept})
	require.NoError(t, err)
	proctest.WaitRunning(t, m, 2)
	proctest.WaitRunning(t, kept, 1)

	require.NoError(t, conn.Close())
	got := awaitEnd(t, c, member.ID)
	assert.Equal(t, registry.StateKilled, got.State)
	assert.Contains(t, got.Reason, "lease of its session "+id+" dropped")
	proctest.RequireGone(t, m)
	in, err := c.Get(ctx, persisted.ID)
	require.NoError(t, err)
	assert.Equal(t, registry.StateRunning, in.State)

	_, err = c.Start(ctx, registry.StartOptions{Command: "true", Session: id})
	require.ErrorIs(t, err, registry.ErrInvalidOptions, "a start in the dropped session")
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, http.StatusBadRequest, ae.Status)
}

// runDaemonAt runs a daemon on dir (as startDaemon does) until stop is
// called, which stops it gracefully: processes keep running.
func runDaemonAt(t *testing.T, dir string, reclaim time.Duration) (c *Client, paths Paths, stop func()) {
	t.Helper()
	paths = Paths{Socket: filepath.Join(dir, "run", "s.sock"), StateDir: filepath.Join(dir, "state")}
	envDir := filepath.Join(dir, "env")
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{
			Paths: paths,
			Open: func(ctx context.Context, target string) (env.Environment, error) {
				return local.New(local.Options{StateDir: envDir, Logger: slog.New(slog.DiscardHandler)})
			},
			Logger:         slog.New(slog.DiscardHandler),
			DefaultGrace:   time.Second,
			SessionReclaim: reclaim,
			Ready:          func(Status) { close(ready) },
		})
	}()
	select {
	case <-ready:
	case err := <-done:
		require.Failf(t, "daemon ended before it was ready", "%v", err)
	case <-time.After(generous):
		require.Fail(t, "daemon not ready")
	}
	c = NewClient(paths.Socket)
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		c.CloseIdle()
		cancel()
		assert.NoError(t, <-done, "daemon")
	}
	t.Cleanup(stop)
	return c, paths, stop
}

// A daemon that stops gracefully kills nothing of a session: the next
// daemon waits for its front end, whose client opens the lease again by
// itself, and the session's processes live on; those of a session whose
// front end did not come back are killed once the wait is over.
func TestSessionLeaseSurvivesADaemonRestart(t *testing.T) {
	dir, err := os.MkdirTemp("", "corrald")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	c1, paths, stop1 := runDaemonAt(t, dir, 0)
	ctx := context.Background()
	lease, err := c1.OpenSession(ctx, registry.SessionOptions{})
	require.NoError(t, err)
	t.Cleanup(lease.Drop)
	gone, _ := rawSession(t, paths.Socket)
	kept, orphan := proctest.Marker(), proctest.Marker()
	proctest.KillOnCleanup(t, kept)
	proctest.KillOnCleanup(t, orphan)
	member, err := c1.Start(ctx, registry.StartOptions{Command: "sleep " + kept, Session: lease.ID()})
	require.NoError(t, err)
	orphaned, err := c1.Start(ctx, registry.StartOptions{Command: "sleep " + orphan, Session: gone})
	require.NoError(t, err)
	proctest.WaitRunning(t, kept, 1)
	proctest.WaitRunning(t, orphan, 1)

	stop1()
	require.Len(t, proctest.Sleepers(kept), 1, "a graceful stop kills nothing")
	require.Len(t, proctest.Sleepers(orphan), 1, "a graceful stop kills nothing")

	// The front end whose lease is raw is gone for good; the client's
	// lease comes back by itself, well within the wait.
	c2, _, stop2 := runDaemonAt(t, dir, 3*time.Second)
	defer stop2()
	require.Eventually(t, func() bool {
		list, err := c2.Sessions(ctx)
		if err != nil {
			return false
		}
		for _, s := range list {
			if s.ID == lease.ID() {
				return s.Holders == 1 && s.ReclaimBy.IsZero()
			}
		}
		return false
	}, generous, 10*time.Millisecond, "the client did not open its lease again")
	got := awaitEnd(t, c2, orphaned.ID)
	assert.Equal(t, registry.StateKilled, got.State)
	assert.Contains(t, got.Reason, fmt.Sprintf("no front end opened its session %s again", gone))
	proctest.RequireGone(t, orphan)
	// The wait is over (the orphan's ended it): a session nobody took
	// back would refuse starts now.
	later, err := c2.Start(ctx, registry.StartOptions{Command: "sleep " + kept, Session: lease.ID()})
	require.NoError(t, err, "the client's lease was not opened again")
	in, err := c2.Get(ctx, member.ID)
	require.NoError(t, err)
	assert.Equal(t, registry.StateRunning, in.State, "the reclaimed session's process")
	// The later start's shell may not have run its sleep yet.
	proctest.WaitRunning(t, kept, 2)
	require.Len(t, proctest.Sleepers(kept), 2)

	// The lease held again is the lease: dropping it now kills.
	lease.Drop()
	for _, id := range []string{member.ID, later.ID} {
		got = awaitEnd(t, c2, id)
		assert.Equal(t, registry.StateKilled, got.State)
	}
	proctest.RequireGone(t, kept)
}

// An open that the daemon never answers (a wedged daemon) fails with the
// caller's deadline instead of hanging.
func TestSessionOpenHasADeadline(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", socket)
	require.NoError(t, err)
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- conn // accepted, never answered
		}
	}()
	defer func() {
		ln.Close()
		for conn := range accepted {
			conn.Close()
		}
	}()
	c := NewClient(socket)
	defer c.CloseIdle()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = c.OpenSession(ctx, registry.SessionOptions{})
	require.ErrorIs(t, err, context.DeadlineExceeded)
}
