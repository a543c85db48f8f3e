package k8s

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/testing/k8stest"
)

// cutProxy forwards TCP connections to the API server until cut, which
// closes its listener and every connection, as a server that stopped
// would; resume listens again on the same address.
type cutProxy struct {
	t        *testing.T
	addr     string
	upstream string
	mu       sync.Mutex
	ln       net.Listener
	conns    map[net.Conn]bool
	wg       sync.WaitGroup
}

func newCutProxy(t *testing.T, upstream string) *cutProxy {
	p := &cutProxy{t: t, upstream: upstream, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(func() {
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[up] = true, true
			p.mu.Unlock()
			p.wg.Go(func() { _, _ = io.Copy(up, c); up.Close(); c.Close() })
			p.wg.Go(func() { _, _ = io.Copy(c, up); up.Close(); c.Close() })
		}
	})
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *cutProxy) resume() {
	ln, err := net.Listen("tcp", p.addr)
	require.NoError(p.t, err)
	p.serve(ln)
}

// proxiedKubeconfig writes a copy of kubeconfig whose clusters are reached
// through a cutProxy.
func proxiedKubeconfig(t *testing.T, kubeconfig string) (string, *cutProxy) {
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	require.NoError(t, err)
	var p *cutProxy
	for _, cl := range cfg.Clusters {
		u, err := url.Parse(cl.Server)
		require.NoError(t, err)
		if p == nil {
			p = newCutProxy(t, u.Host)
		}
		u.Host = p.addr
		cl.Server = u.String()
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, path))
	return path, p
}

// TestAPIServerStopped: while the API server cannot be reached, every call
// ends within its deadline with an error (a Wait never reads as an exit),
// and once it is back the process started before is still there and its
// tree is killed.
func TestAPIServerStopped(t *testing.T) {
	c := k8stest.Cluster(t)
	ns := c.Namespace(t)
	c.Pod(t, ns, "p")
	kc, proxy := proxiedKubeconfig(t, c.Kubeconfig())
	e, err := openEnv(t, kc, "k8s://"+ns+"/p", Options{})
	require.NoError(t, err)
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := e.Start(ctx, env.Spec{Command: "sleep 300"})
	require.NoError(t, err)

	proxy.cut()
	bounded := func(what string, call func(ctx context.Context) error) {
		t.Helper()
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		start := time.Now()
		err := call(cctx)
		took := time.Since(start)
		assert.Error(t, err, "%s while the API server is unreachable", what)
		assert.True(t, errors.Is(err, env.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded), "%s: %v", what, err)
		assert.Less(t, took, 15*time.Second, "%s is bounded by its deadline", what)
	}
	bounded("Wait", func(ctx context.Context) error { _, err := p.Wait(ctx); return err })
	bounded("Start", func(ctx context.Context) error { _, err := e.Start(ctx, env.Spec{Command: "true"}); return err })
	bounded("Signal", func(ctx context.Context) error { return p.Signal(ctx, env.SIGTERM) })

	proxy.resume()
	require.NoError(t, p.Signal(ctx, env.SIGKILL))
	st, err := p.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, env.SIGKILL, st.Signal, "killed after the API server came back: %v", st)
	sv, err := p.Survivors(ctx)
	require.NoError(t, err)
	assert.Empty(t, sv)
}
