package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/plugins/internal/wire"
	pb "github.com/corralhq/corral/plugins/proto"
)

// server serves one Environment over gRPC: what the plugin process exposes
// to the host. Handles are IDs minted here; the host never sees a pointer.
type server struct {
	pb.UnimplementedBackendServer
	plugin Plugin

	mu      sync.Mutex
	env     env.Environment
	procs   map[uint64]env.Process
	lastID  atomic.Uint64
	closing bool
}

func newServer(p Plugin) *server {
	return &server{plugin: p, procs: make(map[uint64]env.Process)}
}

var errNotOpen = fmt.Errorf("plugin: Open was not called: %w", env.ErrUnavailable)

func (s *server) environment() (env.Environment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.env == nil {
		return nil, errNotOpen
	}
	return s.env, nil
}

func (s *server) process(id uint64) (env.Process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.procs[id]
	if !ok {
		// An unknown ID is a handle already released (or one minted by an
		// earlier plugin process, which the host never sends).
		return nil, fmt.Errorf("plugin: process handle %d: %w", id, env.ErrReleased)
	}
	return p, nil
}

func (s *server) add(p env.Process) *pb.ProcessResponse {
	id := s.lastID.Add(1)
	s.mu.Lock()
	s.procs[id] = p
	s.mu.Unlock()
	resp := &pb.ProcessResponse{ProcessId: id, Pid: int64(p.PID())}
	if ref, err := p.Ref(); err == nil {
		resp.Ref = wire.RefToProto(ref)
	}
	return resp
}

func (s *server) forget(id uint64) {
	s.mu.Lock()
	delete(s.procs, id)
	s.mu.Unlock()
}

// release forgets handle id and releases its process, if still known.
func (s *server) release(id uint64) error {
	s.mu.Lock()
	p, ok := s.procs[id]
	delete(s.procs, id)
	s.mu.Unlock()
	if !ok {
		// Release is idempotent.
		return nil
	}
	return p.Release()
}

// closeEnv closes the Environment (if open) and releases every handle
// still known; used by Close and when the host died. Releases the host
// issued before Close (ended Run streams) may still be on their way in
// their own goroutines: releasing what is left here makes Close the point
// after which no handle holds anything.
func (s *server) closeEnv() error {
	s.mu.Lock()
	e := s.env
	s.closing = true
	s.mu.Unlock()
	if e == nil {
		return nil
	}
	err := e.Close()
	s.mu.Lock()
	procs := s.procs
	s.procs = make(map[uint64]env.Process)
	s.mu.Unlock()
	for _, p := range procs {
		_ = p.Release()
	}
	return err
}

func (s *server) Info(context.Context, *pb.InfoRequest) (*pb.InfoResponse, error) {
	resp := &pb.InfoResponse{Name: s.plugin.Name, Version: s.plugin.Version, Description: s.plugin.Description,
		ProtocolVersions: []int32{wire.ProtocolVersion}}
	if c := s.plugin.Capabilities; c != nil {
		resp.Capabilities = wire.CapsToProto(*c)
	}
	return resp, nil
}

func (s *server) Open(ctx context.Context, req *pb.OpenRequest) (*pb.OpenResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.env != nil {
		return nil, wire.ToStatus(fmt.Errorf("plugin: Open called twice (one plugin process serves one environment): %w", env.ErrUnsupported))
	}
	if s.closing {
		return nil, wire.ToStatus(fmt.Errorf("plugin: closed: %w", env.ErrReleased))
	}
	scrubHandshakeEnv()
	e, err := s.plugin.Open(ctx, req.GetTarget())
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	s.env = e
	return &pb.OpenResponse{Name: e.Name(), Capabilities: capsToProto(e)}, nil
}

func (s *server) Capabilities(context.Context, *pb.Empty) (*pb.CapabilitiesResponse, error) {
	e, err := s.environment()
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return &pb.CapabilitiesResponse{Capabilities: capsToProto(e)}, nil
}

func (s *server) Start(ctx context.Context, req *pb.StartRequest) (*pb.ProcessResponse, error) {
	_, resp, err := s.start(ctx, req.GetSpec())
	return resp, err
}

// start starts spec and registers its handle; Start and Run share it.
func (s *server) start(ctx context.Context, spec *pb.Spec) (env.Process, *pb.ProcessResponse, error) {
	e, err := s.environment()
	if err != nil {
		return nil, nil, wire.ToStatus(err)
	}
	p, err := e.Start(ctx, wire.SpecFromProto(spec))
	if err != nil {
		return nil, nil, wire.ToStatus(err)
	}
	return p, s.add(p), nil
}

// Run serves a process's whole life on one stream (see backend.proto).
// The stream's end releases the handle: a host that releases, or dies,
// frees the plugin's side without another call.
func (s *server) Run(stream pb.Backend_RunServer) error {
	ctx := stream.Context()
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	p, resp, err := s.start(ctx, req.GetSpec())
	if err != nil {
		return err
	}
	defer func() {
		if err := s.release(resp.GetProcessId()); err != nil {
			slog.Warn("sdk: release at the end of a Run stream", "pid", resp.GetPid(), "err", err)
		}
	}()
	if err := stream.Send(&pb.RunEvent{Started: resp}); err != nil {
		return err
	}
	for {
		if req.GetWait() {
			// Wait only when asked: in a backend that polls its sandbox,
			// waiting for every process would double the polling.
			ev := &pb.RunEvent{}
			st, err := p.Wait(ctx)
			switch {
			case err == nil:
				ev.Exited = wire.StatusToProto(st)
			case ctx.Err() != nil:
				return nil
			default:
				ev.WaitFailed = true
			}
			if err := stream.Send(ev); err != nil {
				return nil
			}
		}
		if req, err = stream.Recv(); err != nil {
			// The host released the handle, or is gone: no failure.
			return nil
		}
	}
}

func (s *server) Attach(ctx context.Context, req *pb.AttachRequest) (*pb.ProcessResponse, error) {
	e, err := s.environment()
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	p, err := e.Attach(ctx, wire.RefFromProto(req.GetRef()))
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return s.add(p), nil
}

func (s *server) Output(req *pb.OutputRequest, stream pb.Backend_OutputServer) error {
	p, err := s.process(req.GetProcessId())
	if err != nil {
		return wire.ToStatus(err)
	}
	ctx := stream.Context()
	r, err := p.Output(ctx, req.GetOffset())
	if err != nil {
		return wire.ToStatus(err)
	}
	defer r.Close()
	// SendMsg serialises the message before it returns, so one buffer
	// serves the whole stream.
	buf := make([]byte, wire.OutputChunkSize)
	chunk := &pb.OutputChunk{}
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			chunk.Data = buf[:n]
			if err := stream.Send(chunk); err != nil {
				return err
			}
		}
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		if rerr != nil {
			return wire.ToStatus(rerr)
		}
	}
}

func (s *server) Write(ctx context.Context, req *pb.WriteRequest) (*pb.WriteResponse, error) {
	p, err := s.process(req.GetProcessId())
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	n, err := p.Write(ctx, req.GetData())
	if err != nil {
		// The host gets the count too: the status's details cannot carry
		// it, so a partial write is reported as written bytes in the
		// message only. Write on a pipe is all-or-error in practice.
		return nil, wire.ToStatus(err)
	}
	return &pb.WriteResponse{Written: int64(n)}, nil
}

func (s *server) CloseStdin(ctx context.Context, req *pb.ProcessRequest) (*pb.Empty, error) {
	p, err := s.process(req.GetProcessId())
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return &pb.Empty{}, wire.ToStatus(p.CloseStdin(ctx))
}

func (s *server) Signal(ctx context.Context, req *pb.SignalRequest) (*pb.Empty, error) {
	p, err := s.process(req.GetProcessId())
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return &pb.Empty{}, wire.ToStatus(p.Signal(ctx, env.Signal(req.GetSignal())))
}

func (s *server) Survivors(ctx context.Context, req *pb.ProcessRequest) (*pb.SurvivorsResponse, error) {
	p, err := s.process(req.GetProcessId())
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	pids, err := p.Survivors(ctx)
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	out := make([]int64, len(pids))
	for i, pid := range pids {
		out[i] = int64(pid)
	}
	return &pb.SurvivorsResponse{Pids: out}, nil
}

func (s *server) Wait(ctx context.Context, req *pb.ProcessRequest) (*pb.WaitResponse, error) {
	p, err := s.process(req.GetProcessId())
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	st, err := p.Wait(ctx)
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return &pb.WaitResponse{Status: wire.StatusToProto(st)}, nil
}

func (s *server) Resize(ctx context.Context, req *pb.ResizeRequest) (*pb.Empty, error) {
	p, err := s.process(req.GetProcessId())
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return &pb.Empty{}, wire.ToStatus(p.Resize(ctx, wire.WindowSizeFromProto(req.GetSize())))
}

func (s *server) Ref(_ context.Context, req *pb.ProcessRequest) (*pb.RefResponse, error) {
	p, err := s.process(req.GetProcessId())
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	ref, err := p.Ref()
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return &pb.RefResponse{Ref: wire.RefToProto(ref)}, nil
}

func (s *server) Release(_ context.Context, req *pb.ProcessRequest) (*pb.Empty, error) {
	return &pb.Empty{}, wire.ToStatus(s.release(req.GetProcessId()))
}

func (s *server) Remove(ctx context.Context, req *pb.ProcessRequest) (*pb.Empty, error) {
	p, err := s.process(req.GetProcessId())
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	if err := p.Remove(ctx); err != nil {
		return nil, wire.ToStatus(err)
	}
	s.forget(req.GetProcessId())
	return &pb.Empty{}, nil
}

func (s *server) Close(context.Context, *pb.Empty) (*pb.Empty, error) {
	return &pb.Empty{}, wire.ToStatus(s.closeEnv())
}

// handshakeVars are the variables go-plugin passes to a plugin for its
// handshake. They are read once when serving starts; scrubbing them before
// Open keeps them (the host's TLS certificate among them) out of the
// environment of the commands the plugin runs.
var handshakeVars = []string{
	wire.Handshake.MagicCookieKey, "PLUGIN_CLIENT_CERT", "PLUGIN_MIN_PORT", "PLUGIN_MAX_PORT",
	"PLUGIN_PROTOCOL_VERSIONS", "PLUGIN_MULTIPLEX_GRPC", "PLUGIN_UNIX_SOCKET_DIR", "PLUGIN_UNIX_SOCKET_GROUP",
}

func scrubHandshakeEnv() {
	for _, name := range handshakeVars {
		os.Unsetenv(name)
	}
}
