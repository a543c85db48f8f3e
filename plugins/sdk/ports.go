package sdk

import (
	"context"
	"fmt"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/plugins/internal/wire"
	pb "github.com/corralhq/corral/plugins/proto"
)

// The ports calls: each serves the optional interface of the plugin's
// Environment or process (env.PortLister, env.PortWaiter, env.URLChecker),
// and answers ErrUnsupported when it is not implemented. An Environment
// from ServeTransport (env/nohup) implements them all.

func (s *server) EnvListeners(ctx context.Context, _ *pb.Empty) (*pb.ListenersResponse, error) {
	e, err := s.environment()
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	pl, ok := e.(env.PortLister)
	if !ok {
		return nil, wire.ToStatus(fmt.Errorf("plugin: environment %s cannot list ports: %w", e.Name(), env.ErrUnsupported))
	}
	ls, err := pl.Listeners(ctx)
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return wire.ListenersToProto(ls), nil
}

func (s *server) Listeners(ctx context.Context, req *pb.ProcessRequest) (*pb.ListenersResponse, error) {
	p, err := s.process(req.GetProcessId())
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	pl, ok := p.(env.PortLister)
	if !ok {
		return nil, wire.ToStatus(fmt.Errorf("plugin: process %d: cannot list ports: %w", p.PID(), env.ErrUnsupported))
	}
	ls, err := pl.Listeners(ctx)
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return wire.ListenersToProto(ls), nil
}

func (s *server) WaitListening(ctx context.Context, req *pb.WaitListeningRequest) (*pb.ListenersResponse, error) {
	p, err := s.process(req.GetProcessId())
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	pw, ok := p.(env.PortWaiter)
	if !ok {
		return nil, wire.ToStatus(fmt.Errorf("plugin: process %d: cannot wait for a port: %w", p.PID(), env.ErrUnsupported))
	}
	ports := make([]int, len(req.GetPorts()))
	for i, port := range req.GetPorts() {
		ports[i] = int(port)
	}
	ls, err := pw.WaitListening(ctx, ports)
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return wire.ListenersToProto(ls), nil
}

func (s *server) CheckURL(ctx context.Context, req *pb.CheckURLRequest) (*pb.CheckURLResponse, error) {
	e, err := s.environment()
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	uc, ok := e.(env.URLChecker)
	if !ok {
		return nil, wire.ToStatus(fmt.Errorf("plugin: environment %s cannot check URLs: %w", e.Name(), env.ErrUnsupported))
	}
	code, err := uc.CheckURL(ctx, req.GetUrl())
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return &pb.CheckURLResponse{Status: int32(code)}, nil
}

// Health implements env.HealthChecker over the wire: the Environment's own
// check, bounded by the host's deadline; an Environment without one is ok
// (the plugin answered, which is all the host can learn of it).
func (s *server) Health(ctx context.Context, _ *pb.Empty) (*pb.HealthResponse, error) {
	e, err := s.environment()
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	hc, ok := e.(env.HealthChecker)
	if !ok {
		return &pb.HealthResponse{Condition: string(env.ConditionOK)}, nil
	}
	h := hc.Health(ctx)
	return &pb.HealthResponse{Condition: string(h.Condition), Detail: h.Detail}, nil
}
