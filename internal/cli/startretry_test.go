package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/registry"
)

// lostOnce is a daemon stand-in whose first start request dies with the
// connection, as a daemon killed mid-start does; later ones answer.
type lostOnce struct {
	mu   sync.Mutex
	keys []string
	lose int // requests still to lose
}

func (l *lostOnce) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/status":
		json.NewEncoder(w).Encode(daemon.Status{PID: 1})
	case "/v1/processes":
		var req daemon.StartRequest
		json.NewDecoder(r.Body).Decode(&req)
		l.mu.Lock()
		l.keys = append(l.keys, req.Key)
		lose := l.lose > 0
		l.lose--
		l.mu.Unlock()
		if lose {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(registry.Info{ID: "proc_0123456789ab", State: registry.StateRunning, Reused: true})
	default:
		http.NotFound(w, r)
	}
}

func (l *lostOnce) seen() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.keys...)
}

func serveUnix(t *testing.T, h http.Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// TestStartKeyedRepeats: a start whose daemon went away before answering
// is repeated, under the same key, on the daemon that answers next; the
// process it returns is not reported as a reuse of a name. When no daemon
// answers again, the error says that the next daemon ends the start and
// what to do.
func TestStartKeyedRepeats(t *testing.T) {
	h := &lostOnce{lose: 1}
	sock := serveUnix(t, h)
	t.Setenv("CORRAL_SOCKET", sock)
	t.Setenv("CORRAL_NO_AUTOSTART", "1")
	var stderr bytes.Buffer
	in, err := startKeyed(context.Background(), daemon.NewClient(sock), registry.StartOptions{Command: "true"}, &stderr)
	if err != nil {
		require.FailNow(t, fmt.Sprintf("startKeyed: %v (stderr %q)", err, stderr.String()))
	}
	assert.Truef(t, in.ID == "proc_0123456789ab" && !in.Reused, "Info = %+v, want the process, not reused", in)
	keys := h.seen()
	assert.Truef(t, len(keys) == 2 && keys[0] == keys[1] && registry.ValidKey(keys[0]), "keys of the two requests = %q, want one valid key twice", keys)
	if !strings.Contains(stderr.String(), "repeating it") {
		assert.Fail(t, fmt.Sprintf("stderr does not say the start is repeated: %q", stderr.String()))
	}

	// Lost every time: the error is ErrDaemonLost, short, with what to do.
	h2 := &lostOnce{lose: 10}
	sock2 := serveUnix(t, h2)
	t.Setenv("CORRAL_SOCKET", sock2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = startKeyed(ctx, daemon.NewClient(sock2), registry.StartOptions{Command: "true"}, &stderr)
	require.Truef(t, errors.Is(err, daemon.ErrDaemonLost), "err = %v, want ErrDaemonLost", err)
	msg := err.Error()
	assert.Truef(t, len(msg) <= 400 && strings.Contains(msg, "start again"), "error %q: want a short sentence that says what to do", msg)
	n := len(h2.seen())
	assert.Truef(t, n == 1+startRetries, "%d requests, want %d", n, 1+startRetries)
}
