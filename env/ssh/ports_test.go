package ssh_test

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
	"github.com/corralhq/corral/env/ssh"
	"github.com/corralhq/corral/env/ssh/sshtest"
)

// TestPorts runs the port calls over ssh against the test sshd (on this
// machine): a wait that ends when the tree listens (busybox nc), the
// tree's listeners, the host's, and a URL check with the host's client.
func TestPorts(t *testing.T) {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("busybox not found (its nc listens in this test): apt-get install busybox-static")
	}
	srv := sshtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, err := ssh.Open(ctx, srv.Target(), ssh.Options{
		ConfigFile:      "none",
		Home:            t.TempDir(),
		KnownHostsFiles: []string{srv.KnownHosts},
		IdentityFiles:   []string{srv.ClientKey},
		AgentSocket:     "none",
		BaseDir:         t.TempDir() + "/state",
	})
	require.NoError(t, err, "sshd log:\n%s", srv.Log())
	t.Cleanup(func() { _ = e.Close() })
	require.True(t, e.Capabilities().Ports)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	p, err := e.Start(ctx, env.Spec{Command: "sleep 0.1; exec " + bb + " nc -l -p " + strconv.Itoa(port)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Signal(ctx, env.SIGKILL); _, _ = p.Wait(ctx) })
	ls, err := p.(env.PortWaiter).WaitListening(ctx, []int{port})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	assert.Equal(t, port, ls[0].Port)
	assert.Equal(t, p.PID(), ls[0].PID)

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
