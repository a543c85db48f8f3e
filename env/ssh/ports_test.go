package ssh

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env/ssh/sshtest"
	"github.com/corralhq/corral/internal/testing/porttest"
)

// TestPorts runs the port calls over ssh against the test sshd (on this
// machine): a wait that ends when the tree listens (busybox nc), the
// tree's listeners, the host's, and a URL check with the host's client.
func TestPorts(t *testing.T) {
	bb := porttest.Busybox(t)
	srv := sshtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := serverOptions(t, srv)
	opts.BaseDir = t.TempDir() + "/state"
	e, err := Open(ctx, srv.Target(), opts)
	require.NoError(t, err, "sshd log:\n%s", srv.Log())
	t.Cleanup(func() { _ = e.Close() })
	require.True(t, e.Capabilities().Ports)

	porttest.RoundTrip(ctx, t, e, bb)
}
