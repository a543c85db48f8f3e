package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
	"github.com/corralhq/corral/env/ssh"
	"github.com/corralhq/corral/env/ssh/sshtest"
)

// sshOptions reach srv with its own key and known_hosts and nothing of the
// real user's ~/.ssh. Process state lives in base on the host.
func sshOptions(t *testing.T, srv *sshtest.Server, base string) ssh.Options {
	return ssh.Options{
		ConfigFile:      "none",
		Home:            t.TempDir(),
		KnownHostsFiles: []string{srv.KnownHosts},
		IdentityFiles:   []string{srv.ClientKey},
		AgentSocket:     "none",
		BaseDir:         base,
		ReconnectMin:    50 * time.Millisecond,
		ReconnectMax:    500 * time.Millisecond,
	}
}

func sshOpen(t *testing.T, srv *sshtest.Server, opts ssh.Options) env.Environment {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, err := ssh.Open(ctx, srv.Target(), opts)
	if err != nil {
		require.FailNow(t, fmt.Sprintf("ssh.Open(%s): %v\nsshd log:\n%s", srv.Target(), err, srv.Log()))
	}
	t.Cleanup(func() {
		assert.NoError(t, e.Close(), "Close")
	})
	return e
}

func sshCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// sshWaitFor polls cond until it holds, failing after a generous bound.
func sshWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		require.Falsef(t, time.Now().After(deadline), "timed out waiting for %s", what)
		time.Sleep(20 * time.Millisecond)
	}
}

// sshReadUntil reads p's output from offset 0 until it contains want.
func sshReadUntil(t *testing.T, p env.Process, want string) {
	t.Helper()
	w, err := envtest.Watch(sshCtx(t), p, 0)
	require.NoError(t, err, "Output")
	defer w.Close()
	if _, err := w.WaitFor(sshCtx(t), want); err != nil {
		require.FailNow(t, fmt.Sprintf("waiting for %q in the output: %v", want, err))
	}
}

// sshReadAll reads p's whole output.
func sshReadAll(t *testing.T, p env.Process) string {
	t.Helper()
	out, err := envtest.ReadAll(sshCtx(t), p)
	require.NoErrorf(t, err, "reading output: %v (got %d bytes)", err, len(out))
	return string(out)
}

// gatedDialer remembers the TCP connections it opens so a test can cut
// them, and can refuse new ones, so that a drop lasts as long as the test
// needs.
type gatedDialer struct {
	mu     sync.Mutex
	conns  []net.Conn
	dials  int
	closed bool // new dials fail
}

func (d *gatedDialer) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, errors.New("gatedDialer: gate closed by the test")
	}
	d.mu.Unlock()
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dials++
	d.conns = append(d.conns, c)
	return c, nil
}

// cutAndClose closes the gate and every connection.
func (d *gatedDialer) cutAndClose() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for _, c := range d.conns {
		c.Close()
	}
}

func (d *gatedDialer) open() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = false
}

func (d *gatedDialer) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dials
}

func sshExpectedLines(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}
