// Package porttest checks the port calls of an Environment whose sandbox
// shares this machine's network (the test sshd, a plugin whose transport
// runs here): what the backend-specific tests add to the conformance
// suite's Ports group is that the calls cross their own boundary.
package porttest

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

// Busybox returns the path of busybox, whose nc listens in RoundTrip, or
// skips the test saying how to install it.
func Busybox(t *testing.T) string {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("busybox not found (its nc listens in this test): apt-get install busybox-static")
	}
	return bb
}

// FreePort returns a TCP port of this machine that nothing listens on.
func FreePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// RoundTrip starts busybox nc listening on a free port after a short
// delay and checks, through e: a wait that ends when the tree listens,
// the tree's listeners (the same as the wait's answer), the sandbox's
// (which hold it), and a URL check of a server of this test, which must
// answer its status.
func RoundTrip(ctx context.Context, t *testing.T, e env.Environment, busybox string) {
	t.Helper()
	port := FreePort(t)
	p, err := e.Start(ctx, env.Spec{Command: "sleep 0.1; exec " + busybox + " nc -l -p " + strconv.Itoa(port)})
	require.NoError(t, err)
	t.Cleanup(func() {
		// Not ctx: a caller's deferred cancel has ended it by now, and a
		// kill that cannot be sent left nc listening after the test.
		kctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = p.Signal(kctx, env.SIGKILL)
		_, _ = p.Wait(kctx)
		_ = p.Release()
	})
	ls, err := p.(env.PortWaiter).WaitListening(ctx, []int{port})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	assert.Equal(t, port, ls[0].Port)
	assert.Equal(t, p.PID(), ls[0].PID)
	assert.Contains(t, ls[0].Command, "nc -l -p")

	got, err := p.(env.PortLister).Listeners(ctx)
	require.NoError(t, err)
	assert.Equal(t, ls, got)
	all, err := e.(env.PortLister).Listeners(ctx)
	require.NoError(t, err)
	assert.Contains(t, all, ls[0])

	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	t.Cleanup(web.Close)
	code, err := e.(env.URLChecker).CheckURL(ctx, web.URL)
	require.NoError(t, err)
	assert.Equal(t, http.StatusTeapot, code)
}
