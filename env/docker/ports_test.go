package docker

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

// TestPorts runs the port calls against one plain container (busybox's nc
// and httpd listen in it): the tree's listeners and nobody else's, the
// whole sandbox's, a wait inside the container, and URL checks with
// busybox wget.
func TestPorts(t *testing.T) {
	cli := requireEngine(t)
	name := startPlainContainer(t, cli)
	ctx := testContext(t)
	e, err := Open(ctx, SchemeContainer+name, Options{Logger: discardLogger()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	caps := e.Capabilities()
	require.True(t, caps.Ports)
	require.True(t, caps.CheckURL)
	pl := e.(env.PortLister)

	start := func(t *testing.T, cmd string) env.Process {
		t.Helper()
		p, err := e.Start(ctx, env.Spec{Command: cmd})
		require.NoError(t, err)
		t.Cleanup(func() {
			_ = p.Signal(ctx, env.SIGKILL)
			_, _ = p.Wait(ctx)
			_ = p.Release()
		})
		return p
	}

	t.Run("Listeners", func(t *testing.T) {
		// A foreign listener on 7001 (another tree), ours on 7002 (v4)
		// and 7003 (httpd, a grandchild, on 127.0.0.1).
		other := start(t, "exec nc -l -p 7001")
		p := start(t, "nc -l -p 7002 & sh -c 'httpd -f -p 127.0.0.1:7003 -h /' & wait")
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			ls, err := p.(env.PortLister).Listeners(ctx)
			require.NoError(c, err)
			require.Len(c, ls, 2, "%v", ls)
			assert.Equal(c, 7002, ls[0].Port)
			assert.Contains(c, ls[0].Command, "nc -l -p 7002")
			assert.Equal(c, 7003, ls[1].Port)
			assert.Equal(c, "127.0.0.1", ls[1].Addr)
			assert.Contains(c, ls[1].Command, "httpd")
			assert.NotZero(c, ls[1].PID)
		}, 10*time.Second, 20*time.Millisecond)
		ls, err := other.(env.PortLister).Listeners(ctx)
		require.NoError(t, err)
		require.Len(t, ls, 1)
		assert.Equal(t, 7001, ls[0].Port)
		assert.Equal(t, other.PID(), ls[0].PID)

		all, err := pl.Listeners(ctx)
		require.NoError(t, err)
		var ports []int
		for _, l := range all {
			ports = append(ports, l.Port)
			assert.NotZero(t, l.PID, "%v", l)
		}
		assert.Subset(t, ports, []int{7001, 7002, 7003})
	})

	t.Run("WaitListening", func(t *testing.T) {
		// A foreign process on 7011 does not end the wait; the tree's
		// listener on 7012, after a delay, does.
		start(t, "exec nc -l -p 7011")
		p := start(t, "sleep 0.3; exec nc -l -p 7012")
		ls, err := p.(env.PortWaiter).WaitListening(ctx, []int{7011, 7012})
		require.NoError(t, err)
		require.Len(t, ls, 1)
		assert.Equal(t, 7012, ls[0].Port)
	})

	t.Run("CheckURL", func(t *testing.T) {
		start(t, "mkdir -p /tmp/www && echo hi >/tmp/www/index.html && exec httpd -f -p 7021 -h /tmp/www")
		uc := e.(env.URLChecker)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			code, err := uc.CheckURL(ctx, "http://127.0.0.1:7021/")
			require.NoError(c, err)
			assert.Equal(c, 200, code)
		}, 10*time.Second, 20*time.Millisecond)
		code, err := uc.CheckURL(ctx, "http://127.0.0.1:7021/nope")
		require.NoError(t, err)
		assert.Equal(t, 404, code)
		_, err = uc.CheckURL(ctx, "http://127.0.0.1:"+strconv.Itoa(freeClosedPort(t))+"/")
		require.Error(t, err)
		t.Log(err)
		_, err = uc.CheckURL(ctx, "ftp://x/")
		require.Error(t, err)
	})
}

func freeClosedPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
