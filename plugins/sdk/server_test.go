package sdk

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/corralhq/corral/env"
	pb "github.com/corralhq/corral/plugins/proto"
)

// fakeEnv is an Environment whose processes end when the test says so.
type fakeEnv struct {
	mu     sync.Mutex
	procs  []*fakeProc
	closed bool
}

func (e *fakeEnv) Name() string                   { return "fake" }
func (e *fakeEnv) Capabilities() env.Capabilities { return env.Capabilities{} }

func (e *fakeEnv) Start(context.Context, env.Spec) (env.Process, error) {
	p := &fakeProc{pid: 100, exit: make(chan struct{}), released: make(chan struct{})}
	e.mu.Lock()
	defer e.mu.Unlock()
	p.pid += len(e.procs)
	e.procs = append(e.procs, p)
	return p, nil
}

func (e *fakeEnv) Attach(context.Context, env.Ref) (env.Process, error) {
	return nil, env.ErrUnsupported
}

func (e *fakeEnv) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	return nil
}

func (e *fakeEnv) proc(t *testing.T, i int) *fakeProc {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if i >= len(e.procs) {
		t.Fatalf("process %d was not started", i)
	}
	return e.procs[i]
}

type fakeProc struct {
	pid      int
	exit     chan struct{} // closed by the test: the process ended
	status   env.ExitStatus
	waitErr  error
	waits    atomic.Int32
	once     sync.Once
	released chan struct{}
}

func (p *fakeProc) end(st env.ExitStatus, err error) {
	p.status, p.waitErr = st, err
	close(p.exit)
}

func (p *fakeProc) PID() int { return p.pid }
func (p *fakeProc) Output(context.Context, int64) (io.ReadCloser, error) {
	return nil, env.ErrUnsupported
}
func (p *fakeProc) Write(context.Context, []byte) (int, error)   { return 0, env.ErrStdinClosed }
func (p *fakeProc) CloseStdin(context.Context) error             { return nil }
func (p *fakeProc) Signal(context.Context, env.Signal) error     { return nil }
func (p *fakeProc) Survivors(context.Context) ([]int, error)     { return nil, nil }
func (p *fakeProc) Resize(context.Context, env.WindowSize) error { return env.ErrUnsupported }
func (p *fakeProc) Ref() (env.Ref, error)                        { return env.Ref{}, env.ErrUnsupported }
func (p *fakeProc) Remove(context.Context) error                 { return p.Release() }

func (p *fakeProc) Wait(ctx context.Context) (env.ExitStatus, error) {
	p.waits.Add(1)
	select {
	case <-p.exit:
		return p.status, p.waitErr
	case <-ctx.Done():
		return env.ExitStatus{}, ctx.Err()
	}
}

func (p *fakeProc) Release() error {
	p.once.Do(func() { close(p.released) })
	return nil
}

// awaitReleased waits until p is released; the bound only turns a hang
// into a failure.
func awaitReleased(t *testing.T, p *fakeProc) {
	t.Helper()
	select {
	case <-p.released:
	case <-time.After(30 * time.Second):
		t.Fatalf("process %d was not released", p.pid)
	}
}

// serve runs the SDK's server for a fakeEnv in memory and returns a client
// on which Open was called.
func serve(t *testing.T) (*server, *fakeEnv, pb.BackendClient) {
	t.Helper()
	fe := &fakeEnv{}
	srv := newServer(Plugin{Name: "fake", Open: func(context.Context, string) (env.Environment, error) { return fe, nil }})
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	pb.RegisterBackendServer(gs, srv)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient("passthrough:///fake",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	client := pb.NewBackendClient(cc)
	if _, err := client.Open(context.Background(), &pb.OpenRequest{Target: "fake://"}); err != nil {
		t.Fatal(err)
	}
	return srv, fe, client
}

// run opens a Run stream and starts a process on it.
func run(t *testing.T, client pb.BackendClient) (pb.Backend_RunClient, *pb.ProcessResponse, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := client.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.RunRequest{Spec: &pb.Spec{Command: "true"}}); err != nil {
		t.Fatal(err)
	}
	ev, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if ev.GetStarted() == nil {
		t.Fatalf("first event %v, want started", ev)
	}
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
	p := fe.proc(t, 0)
	if started.GetPid() != int64(p.pid) || !srv.known(started.GetProcessId()) {
		t.Fatalf("started %v: not the handle of process %d", started, p.pid)
	}
	if err := stream.Send(&pb.RunRequest{Wait: true}); err != nil {
		t.Fatal(err)
	}
	p.end(env.Exited(3), nil)
	ev, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := ev.GetExited(); got == nil || got.GetCode() != 3 {
		t.Fatalf("answer to wait = %v, want exit code 3", ev)
	}
	if _, err := client.Signal(context.Background(), &pb.SignalRequest{ProcessId: started.GetProcessId(), Signal: "TERM"}); err != nil {
		t.Fatalf("Signal on the stream's handle: %v", err)
	}
	cancel()
	awaitReleased(t, p)
	if srv.known(started.GetProcessId()) {
		t.Error("the handle outlived its stream")
	}
}

// TestRunWaitsOnlyWhenAsked: without a wait request the plugin never calls
// the Environment's Wait (a polling backend would poll for nothing).
func TestRunWaitsOnlyWhenAsked(t *testing.T) {
	_, fe, client := serve(t)
	_, _, cancel := run(t, client)
	p := fe.proc(t, 0)
	p.end(env.Exited(0), nil)
	cancel()
	awaitReleased(t, p)
	if n := p.waits.Load(); n != 0 {
		t.Errorf("Wait called %d times, want 0", n)
	}
}

// TestRunWaitFailed: a failing Wait is reported as wait_failed, and the
// stream stays usable.
func TestRunWaitFailed(t *testing.T) {
	_, fe, client := serve(t)
	stream, started, _ := run(t, client)
	p := fe.proc(t, 0)
	p.end(env.ExitStatus{}, errors.New("lost track"))
	if err := stream.Send(&pb.RunRequest{Wait: true}); err != nil {
		t.Fatal(err)
	}
	ev, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if !ev.GetWaitFailed() || ev.GetExited() != nil {
		t.Fatalf("answer to a failing wait = %v, want wait_failed", ev)
	}
	_, err = client.Wait(context.Background(), &pb.ProcessRequest{ProcessId: started.GetProcessId()})
	if err == nil {
		t.Fatal("Wait call after wait_failed succeeded, want the Environment's error")
	}
}

// TestCloseReleasesHandles: Close releases every handle still held, Run
// streams that are still open included.
func TestCloseReleasesHandles(t *testing.T) {
	_, fe, client := serve(t)
	run(t, client)
	run(t, client)
	if _, err := client.Start(context.Background(), &pb.StartRequest{Spec: &pb.Spec{Command: "true"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Close(context.Background(), &pb.Empty{}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		select {
		case <-fe.proc(t, i).released:
		default:
			t.Errorf("process %d not released when Close returned", i)
		}
	}
	fe.mu.Lock()
	closed := fe.closed
	fe.mu.Unlock()
	if !closed {
		t.Error("Close did not close the Environment")
	}
}
