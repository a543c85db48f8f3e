package ssh

import (
	"bufio"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/ssh/sshtest"
)

// idleTransport dials a new sshd with IdleClose set, through a dialer that
// counts the connections.
func idleTransport(t *testing.T, idle time.Duration) (Options, *Transport, *recordingDialer, *sshtest.Server) {
	t.Helper()
	srv := sshtest.Start(t)
	d := &recordingDialer{}
	opts := serverOptions(t, srv)
	opts.Dial = d.Dial
	opts.IdleClose = idle
	return opts, dialServer(t, srv, opts), d, srv
}

// An unused connection is closed after IdleClose, with nothing dialled in
// the background; the next call dials again and runs.
func TestIdleCloseDialsAgainOnDemand(t *testing.T) {
	opts, tr, d, _ := idleTransport(t, 150*time.Millisecond)

	out, _, _ := run(t, tr, "echo one", nil)
	require.Equal(t, "one\n", out)
	st := tr.ConnStatus()
	require.Equal(t, env.ConnConnected, st.State)
	assert.False(t, st.IdleCloseAt.IsZero(), "a connected, unused connection says when it closes")

	require.Eventually(t, func() bool { return tr.ConnStatus().State == env.ConnIdle },
		condWait, condPoll, "waiting for the idle close")
	select {
	case <-d.last().thaw: // closed by Close
	default:
		require.FailNow(t, "idle, but the TCP connection is still open")
	}
	time.Sleep(3 * opts.IdleClose)
	require.Equal(t, 1, d.dialCount(), "an idle connection was dialled again with nobody asking")

	out, _, _ = run(t, tr, "echo two", nil)
	require.Equal(t, "two\n", out)
	require.Equal(t, 2, d.dialCount())
	require.Equal(t, env.ConnConnected, tr.ConnStatus().State)
	// Resident shells open on the new connection.
	sh, err := tr.OpenShell(context.Background(), `read x; echo "hi $x"`)
	require.NoError(t, err)
	defer sh.Stop()
	_, err = io.WriteString(sh.Stdin, "lib\n")
	require.NoError(t, err)
	line, err := bufio.NewReader(sh.Stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "hi lib\n", line)
}

// A call under way keeps the connection open however long it takes.
func TestIdleCloseSparesCallsUnderWay(t *testing.T) {
	_, tr, d, _ := idleTransport(t, 50*time.Millisecond)

	done := make(chan string, 1)
	go func() {
		var out strings.Builder
		_, err := tr.Exec(context.Background(), "sleep 0.6; echo done", nil, &out, nil)
		if err != nil {
			done <- err.Error()
			return
		}
		done <- out.String()
	}()
	require.Eventually(t, func() bool { return tr.ConnStatus().InUse == 1 }, condWait, condPoll)
	require.True(t, tr.ConnStatus().IdleCloseAt.IsZero(), "a connection in use has no idle close time")
	require.Equal(t, "done\n", <-done)
	require.Equal(t, 1, d.dialCount(), "the connection was closed under a running call")
}

// A dial on demand that fails is the call's error, quickly, and the
// connection stays idle (no reconnect loop for a host nobody uses); the
// next call tries again.
func TestIdleCloseDialFailureIsTheCallsError(t *testing.T) {
	_, tr, _, srv := idleTransport(t, 50*time.Millisecond)
	run(t, tr, "true", nil)
	require.Eventually(t, func() bool { return tr.ConnStatus().State == env.ConnIdle },
		condWait, condPoll, "waiting for the idle close")

	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), condWait)
	defer cancel()
	_, err := tr.Exec(ctx, "true", nil, nil, nil)
	require.Error(t, err)
	require.True(t, errors.Is(err, env.ErrUnavailable), "want ErrUnavailable, got %v", err)
	require.Contains(t, err.Error(), "connect again after idle close")
	st := tr.ConnStatus()
	require.Equal(t, env.ConnIdle, st.State)
	require.Contains(t, st.Detail, "last dial failed")

	srv.Restart(t)
	out, _, _ := run(t, tr, "echo back", nil)
	require.Equal(t, "back\n", out)
}
