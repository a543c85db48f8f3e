package plugins_test

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/plugins"
	pb "github.com/corralhq/corral/plugins/proto"
)

// callLog records the calls the host makes, by full method name.
type callLog struct {
	mu    sync.Mutex
	calls map[string]int
}

func (l *callLog) add(method string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.calls == nil {
		l.calls = map[string]int{}
	}
	l.calls[method]++
}

func (l *callLog) count(method string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[method]
}

func (l *callLog) options() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			l.add(method)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			l.add(method)
			return streamer(ctx, desc, cc, method, opts...)
		}),
	}
}

func openWith(t *testing.T, opts plugins.Options) env.Environment {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := plugins.Open(ctx, "localplugin://?state="+t.TempDir(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	return e
}

// startWait runs one Start, two Waits and a Release, checking the status.
func startWait(t *testing.T, e env.Environment) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := e.Start(ctx, env.Spec{Command: "exit 3"})
	require.NoError(t, err)
	for range 2 {
		st, err := p.Wait(ctx)
		require.Truef(t, err == nil && st == env.Exited(3), "Wait = %v, %v; want exit status 3", st, err)
	}
	require.NoError(t, p.Release())
	if _, err := p.Wait(ctx); err == nil {
		assert.Fail(t, "Wait after Release succeeded")
	}
}

// TestRunStream: a process's Start, Waits and Release travel on its Run
// stream — no Start, Wait or Release call — and the Run stream of the next
// Start is opened ahead.
func TestRunStream(t *testing.T) {
	var log callLog
	e := openWith(t, plugins.WithDialOptions(testOptions(), log.options()...))
	startWait(t, e)
	startWait(t, e)
	require.NoError(t, e.Close())
	for _, m := range []string{pb.Backend_Start_FullMethodName, pb.Backend_Wait_FullMethodName, pb.Backend_Release_FullMethodName} {
		n := log.count(m)
		assert.Truef(t, n == 0, "%s called %d times, want 0", m, n)
	}
	// Two processes, plus the stream opened ahead for a third.
	n := log.count(pb.Backend_Run_FullMethodName)
	assert.Truef(t, n == 3, "Run streams opened: %d, want 3", n)
}

// oldPlugin makes the host see a plugin built before Run: the Run stream
// ends at once with a bare Unimplemented, as a gRPC server answers an
// unknown method.
func oldPlugin() grpc.DialOption {
	return grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if method != pb.Backend_Run_FullMethodName {
			return streamer(ctx, desc, cc, method, opts...)
		}
		return endedStream{ctx: ctx, err: status.Error(codes.Unimplemented, "unknown method Run for service corral.plugin.v1.Backend")}, nil
	})
}

type endedStream struct {
	ctx context.Context
	err error
}

func (s endedStream) Header() (metadata.MD, error) { return nil, s.err }
func (s endedStream) Trailer() metadata.MD         { return nil }
func (s endedStream) CloseSend() error             { return nil }
func (s endedStream) Context() context.Context     { return s.ctx }
func (s endedStream) SendMsg(any) error            { return io.EOF }
func (s endedStream) RecvMsg(any) error            { return s.err }

// TestRunFallback: against a plugin without Run, processes start, wait and
// release through the separate calls, and Run is tried only once.
func TestRunFallback(t *testing.T) {
	var log callLog
	e := openWith(t, plugins.WithDialOptions(testOptions(), append(log.options(), oldPlugin())...))
	startWait(t, e)
	startWait(t, e)
	if err := e.Close(); err != nil { // waits for the Release calls
		require.FailNow(t, fmt.Sprint(err))
	}
	if n := log.count(pb.Backend_Run_FullMethodName); n != 1 {
		assert.Fail(t, fmt.Sprintf("Run tried %d times, want once", n))
	}
	for m, want := range map[string]int{pb.Backend_Start_FullMethodName: 2, pb.Backend_Wait_FullMethodName: 4, pb.Backend_Release_FullMethodName: 2} {
		n := log.count(m)
		assert.Truef(t, n == want, "%s called %d times, want %d", m, n, want)
	}
}
