package sdk

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
	pb "github.com/corralhq/corral/plugins/proto"
)

// proc returns the i-th process fe started.
func proc(t *testing.T, fe *envtest.Fake, i int) *envtest.FakeProcess {
	t.Helper()
	procs := fe.Procs()
	require.Truef(t, i < len(procs), "process %d was not started", i)
	return procs[i]
}

// awaitReleased waits until p is released; the bound only turns a hang
// into a failure.
func awaitReleased(t *testing.T, p *envtest.FakeProcess) {
	t.Helper()
	select {
	case <-p.Released():
	case <-time.After(30 * time.Second):
		require.FailNow(t, fmt.Sprintf("process %d was not released", p.PID()))
	}
}

// serve runs the SDK's server for an envtest.Fake in memory and returns a
// client on which Open was called.
func serve(t *testing.T) (*server, *envtest.Fake, pb.BackendClient) {
	t.Helper()
	fe := &envtest.Fake{}
	srv, client, _ := serveEnv(t, fe)
	return srv, fe, client
}

// serveEnv serves e in memory and returns the server, a client and Open's
// answer.
func serveEnv(t *testing.T, e env.Environment) (*server, pb.BackendClient, *pb.OpenResponse) {
	t.Helper()
	srv := newServer(Plugin{Name: "fake", Open: func(context.Context, string) (env.Environment, error) { return e, nil }})
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	pb.RegisterBackendServer(gs, srv)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient("passthrough:///fake",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	client := pb.NewBackendClient(cc)
	open, err := client.Open(context.Background(), &pb.OpenRequest{Target: "fake://"})
	if err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	return srv, client, open
}

// run opens a Run stream and starts a process on it.
func run(t *testing.T, client pb.BackendClient) (pb.Backend_RunClient, *pb.ProcessResponse, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := client.Run(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&pb.RunRequest{Spec: &pb.Spec{Command: "true"}}))
	ev, err := stream.Recv()
	require.NoError(t, err)
	require.Truef(t, ev.GetStarted() != nil, "first event %v, want started", ev)
	return stream, ev.GetStarted(), cancel
}

func (s *server) known(id uint64) bool {
	_, err := s.process(id)
	return err == nil
}

// TestRunWaitAndRelease: a wait request is answered with the exit status
// on the stream, the handle works in other calls while the stream lives,
// and ending the stream releases it.
func TestRunWaitAndRelease(t *testing.T) {
	srv, fe, client := serve(t)
	stream, started, cancel := run(t, client)
	p := proc(t, fe, 0)
	if started.GetPid() != int64(p.PID()) || !srv.known(started.GetProcessId()) {
		require.FailNow(t, fmt.Sprintf("started %v: not the handle of process %d", started, p.PID()))
	}
	require.NoError(t, stream.Send(&pb.RunRequest{Wait: true}))
	// A signal the process survives, while the stream waits: the handle
	// works in other calls, and the signal reaches the process.
	if _, err := client.Signal(context.Background(), &pb.SignalRequest{ProcessId: started.GetProcessId(), Signal: "USR1"}); err != nil {
		require.FailNow(t, fmt.Sprintf("Signal on the stream's handle: %v", err))
	}
	if got := p.Signals(); len(got) != 1 || got[0] != env.SIGUSR1 {
		require.FailNow(t, fmt.Sprintf("signals delivered %v, want [USR1]", got))
	}
	p.Exit(env.Exited(3))
	ev, err := stream.Recv()
	require.NoError(t, err)
	got := ev.GetExited()
	require.Truef(t, got != nil && got.GetCode() == 3, "answer to wait = %v, want exit code 3", ev)
	// The answered wait did not end the handle.
	if w, err := client.Wait(context.Background(), &pb.ProcessRequest{ProcessId: started.GetProcessId()}); err != nil || w.GetStatus().GetCode() != 3 {
		require.FailNow(t, fmt.Sprintf("Wait call on the stream's handle after the answer = %v, %v; want exit code 3", w, err))
	}
	cancel()
	awaitReleased(t, p)
	assert.False(t, srv.known(started.GetProcessId()), "the handle outlived its stream")
}

// TestRunWaitsOnlyWhenAsked: without a wait request the plugin never calls
// the Environment's Wait (a polling backend would poll for nothing).
func TestRunWaitsOnlyWhenAsked(t *testing.T) {
	_, fe, client := serve(t)
	_, _, cancel := run(t, client)
	p := proc(t, fe, 0)
	p.Exit(env.Exited(0))
	cancel()
	awaitReleased(t, p)
	n := p.Waits()
	assert.Truef(t, n == 0, "Wait called %d times, want 0", n)
}

// TestRunWaitFailed: a failing Wait is reported as wait_failed, and the
// stream stays usable.
func TestRunWaitFailed(t *testing.T) {
	_, fe, client := serve(t)
	stream, started, _ := run(t, client)
	p := proc(t, fe, 0)
	p.Lose(errors.New("lost track"))
	require.NoError(t, stream.Send(&pb.RunRequest{Wait: true}))
	ev, err := stream.Recv()
	require.NoError(t, err)
	require.Truef(t, ev.GetWaitFailed() && ev.GetExited() == nil, "answer to a failing wait = %v, want wait_failed", ev)
	_, err = client.Wait(context.Background(), &pb.ProcessRequest{ProcessId: started.GetProcessId()})
	require.Error(t, err, "Wait call after wait_failed succeeded, want the Environment's error")
}

// TestCloseReleasesHandles: Close releases every handle still held, Run
// streams that are still open included.
func TestCloseReleasesHandles(t *testing.T) {
	_, fe, client := serve(t)
	run(t, client)
	run(t, client)
	if _, err := client.Start(context.Background(), &pb.StartRequest{Spec: &pb.Spec{Command: "true"}}); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	_, err := client.Close(context.Background(), &pb.Empty{})
	require.NoError(t, err)
	for i := range 3 {
		select {
		case <-proc(t, fe, i).Released():
		default:
			assert.Fail(t, fmt.Sprintf("process %d not released when Close returned", i))
		}
	}
	assert.True(t, fe.Closed(), "Close did not close the Environment")
}
