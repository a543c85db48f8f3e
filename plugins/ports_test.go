package plugins_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/testing/porttest"
	"github.com/corralhq/corral/plugins"
	pb "github.com/corralhq/corral/plugins/proto"
)

// TestPorts: the ports calls of a ServeTransport plugin's engine (hostsh:
// env/nohup on this machine) cross the boundary: a wait that ends when the
// tree listens (busybox nc), the tree's listeners, the sandbox's, and a URL
// check.
func TestPorts(t *testing.T) {
	bb := porttest.Busybox(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := openPlugin(t, "hostsh://?base="+t.TempDir()+"/state")
	t.Cleanup(func() { e.Close() })
	require.True(t, e.Capabilities().Ports)
	require.True(t, e.Capabilities().CheckURL)
	porttest.RoundTrip(ctx, t, e, bb)
}

// TestPortsOldPlugin: a plugin built before the ports calls (gRPC answers
// them Unimplemented) gives ErrUnsupported, not a crash or a hang.
func TestPortsOldPlugin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	unimplemented := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		switch method {
		case pb.Backend_EnvListeners_FullMethodName, pb.Backend_Listeners_FullMethodName,
			pb.Backend_WaitListening_FullMethodName, pb.Backend_CheckURL_FullMethodName:
			return status.Error(codes.Unimplemented, "unknown method for service corral.plugin.v1.Backend")
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	e := openWith(t, plugins.WithDialOptions(testOptions(), unimplemented))
	p, err := e.Start(ctx, env.Spec{Command: "sleep 30"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Signal(ctx, env.SIGKILL); _, _ = p.Wait(ctx); _ = p.Release() })

	_, err = e.(env.PortLister).Listeners(ctx)
	require.ErrorIs(t, err, env.ErrUnsupported)
	_, err = e.(env.URLChecker).CheckURL(ctx, "http://127.0.0.1:1/")
	require.ErrorIs(t, err, env.ErrUnsupported)
	_, err = p.(env.PortLister).Listeners(ctx)
	require.ErrorIs(t, err, env.ErrUnsupported)
	_, err = p.(env.PortWaiter).WaitListening(ctx, []int{1})
	require.ErrorIs(t, err, env.ErrUnsupported)
}
