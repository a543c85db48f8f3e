package ssh

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/corralhq/corral/env/ssh/sshtest"
)

func TestMain(m *testing.M) {
	// A session open caught in x/crypto's race with a dying connection
	// never returns (see conn.openChannel); it is abandoned on purpose,
	// with the goroutine that would close the session if it ever opened.
	// Follows, whose calls are cancelled whenever a reader closes, meet
	// that race more often than other calls did.
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("golang.org/x/crypto/ssh.(*mux).openChannel"),
		goleak.IgnoreTopFunction("github.com/corralhq/corral/env/ssh.(*conn).openChannel.func2"))
}

// testLogger sends the backend's logs to the test's log, so a failure
// shows the connection's story.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(&tWriter{t: t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

type tWriter struct {
	mu sync.Mutex
	t  testing.TB
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// serverOptions are Options that reach srv with its client key and
// known_hosts and nothing of the real user's ~/.ssh.
func serverOptions(t testing.TB, srv *sshtest.Server) Options {
	return Options{
		ConfigFile:      "none",
		Home:            t.TempDir(),
		KnownHostsFiles: []string{srv.KnownHosts},
		IdentityFiles:   []string{srv.ClientKey},
		AgentSocket:     "none",
		Logger:          testLogger(t),
	}
}

func dialServer(t testing.TB, srv *sshtest.Server, opts Options) *Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := Dial(ctx, srv.Target(), opts)
	if err != nil {
		require.FailNow(t, fmt.Sprintf("Dial(%s): %v\nsshd log:\n%s", srv.Target(), err, srv.Log()))
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// run executes script and returns its stdout, stderr and exit code.
func run(t testing.TB, tr *Transport, script string, stdin io.Reader) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code, err := tr.Exec(ctx, script, stdin, &out, &errOut)
	if err != nil {
		require.FailNow(t, fmt.Sprintf("Exec(%q): %v", script, err))
	}
	return out.String(), errOut.String(), code
}

// recordingDialer remembers every TCP connection it opens, so a test can
// cut them from the client side.
type recordingDialer struct {
	mu    sync.Mutex
	conns []*freezableConn
	dials int
}

func (d *recordingDialer) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dials++
	fc := &freezableConn{Conn: c, thaw: make(chan struct{})}
	d.conns = append(d.conns, fc)
	return fc, nil
}

func (d *recordingDialer) dialCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dials
}

func (d *recordingDialer) last() *freezableConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.conns[len(d.conns)-1]
}

// freezableConn can stop delivering data in both directions without
// closing, as a dead peer or a silently dropped route does.
type freezableConn struct {
	net.Conn
	mu     sync.Mutex
	frozen bool
	thaw   chan struct{} // closed by Close, ending a frozen Read
	closed sync.Once
}

func (c *freezableConn) Freeze() {
	c.mu.Lock()
	c.frozen = true
	c.mu.Unlock()
}

func (c *freezableConn) isFrozen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frozen
}

func (c *freezableConn) Read(p []byte) (int, error) {
	if c.isFrozen() {
		<-c.thaw
		return 0, net.ErrClosed
	}
	n, err := c.Conn.Read(p)
	if c.isFrozen() {
		<-c.thaw
		return 0, net.ErrClosed
	}
	return n, err
}

func (c *freezableConn) Write(p []byte) (int, error) {
	if c.isFrozen() {
		return len(p), nil // swallowed, as by a black hole
	}
	return c.Conn.Write(p)
}

func (c *freezableConn) Close() error {
	c.closed.Do(func() { close(c.thaw) })
	return c.Conn.Close()
}

// waitFor polls cond until it holds or the generous deadline passes.
// condWait bounds a wait for a condition (require.Eventually), which is
// looked at again every condPoll.
const (
	condWait = 60 * time.Second
	condPoll = 20 * time.Millisecond
)

func writeTestFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}
