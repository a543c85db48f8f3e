package ssh

import (
	"context"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
	"github.com/corralhq/corral/env/ssh/sshtest"
)

// countingShells is the ssh Transport with its resident shells and execs
// counted.
type countingShells struct {
	*Transport
	shells, execs atomic.Int64
}

func (c *countingShells) OpenShell(ctx context.Context, script string) (*nohup.Shell, error) {
	sh, err := c.Transport.OpenShell(ctx, script)
	if err == nil {
		c.shells.Add(1)
	}
	return sh, err
}

func (c *countingShells) Exec(ctx context.Context, script string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	c.execs.Add(1)
	return c.Transport.Exec(ctx, script, stdin, stdout, stderr)
}

// TestEngineRunsOnResidentShells checks that the engine's calls over ssh
// run on a few resident shells that stay open (not a session per call),
// that more concurrent processes than residents still run (the rest on
// sessions of their own), and that after sshd restarts (the residents die
// with the connection) calls run again, on new residents.
func TestEngineRunsOnResidentShells(t *testing.T) {
	srv := sshtest.Start(t)
	tr := &countingShells{Transport: dialServer(t, srv, serverOptions(t, srv))}
	e, err := nohup.New(tr, nohup.Options{Name: "ssh-residents", Residents: tr.MaxShells(), Logger: discardLogger()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	runOne := func(cmd, want string) {
		t.Helper()
		p, err := e.Start(ctx, env.Spec{Command: cmd})
		require.NoError(t, err)
		st, err := p.Wait(ctx)
		require.NoError(t, err)
		require.True(t, st.Success(), "status %v", st)
		r, err := p.Output(ctx, 0)
		require.NoError(t, err)
		out, err := io.ReadAll(r)
		r.Close()
		require.NoError(t, err)
		require.Equal(t, want, string(out))
	}
	runOne("echo warm", "warm\n")
	shells, execs := tr.shells.Load(), tr.execs.Load()
	for range 5 {
		runOne("echo again", "again\n")
	}
	assert.Equal(t, shells, tr.shells.Load(), "calls in turn reuse the resident shells")
	assert.Equal(t, execs, tr.execs.Load(), "calls in turn need no exec")
	assert.LessOrEqual(t, tr.shells.Load(), int64(tr.MaxShells()))

	// More concurrent processes than residents (MaxSessions/2 = 5): all run.
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			p, err := e.Start(ctx, env.Spec{Command: "sleep 0.2; echo " + strings.Repeat("x", i+1)})
			if !assert.NoError(t, err) {
				return
			}
			st, err := p.Wait(ctx)
			assert.NoError(t, err)
			assert.True(t, st.Success())
		})
	}
	wg.Wait()

	before := tr.shells.Load()
	srv.Restart(t)
	require.NoError(t, tr.WaitConnected(ctx))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := e.Start(ctx, env.Spec{Command: "echo back"})
		require.NoError(c, err)
		st, err := p.Wait(ctx)
		require.NoError(c, err)
		assert.True(c, st.Success())
	}, 30*time.Second, 50*time.Millisecond, "waiting for the engine to work again after sshd restarted")
	runOne("echo resident", "resident\n")
	assert.Greater(t, tr.shells.Load(), before, "new resident shells after the restart")
}
