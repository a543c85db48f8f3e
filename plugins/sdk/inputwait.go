package sdk

import (
	"context"
	"fmt"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/plugins/internal/wire"
	pb "github.com/corralhq/corral/plugins/proto"
)

// InputWaits serves env.InputWatcher when the plugin's Environment
// implements it (an Environment from ServeTransport does: env/nohup
// looks), and answers ErrUnsupported otherwise, as Capabilities'
// input_wait said in advance.
func (s *server) InputWaits(ctx context.Context, req *pb.InputWaitsRequest) (*pb.InputWaitsResponse, error) {
	e, err := s.environment()
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	iw, ok := e.(env.InputWatcher)
	if !ok {
		return nil, wire.ToStatus(fmt.Errorf("plugin: environment %s cannot tell input waits: %w", e.Name(), env.ErrUnsupported))
	}
	out, err := perProcess(s, e, req.GetProcessIds(), "input waits", func(procs []env.Process) ([]*env.InputWait, error) {
		return iw.InputWaits(ctx, procs)
	})
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return wire.InputWaitsToProto(out), nil
}

// perProcess asks the Environment about the processes ids name, in one
// call of ask for those the plugin knows, and returns one T per id: the
// zero T for a handle it does not know (released, or minted by an earlier
// plugin process), about which the Environment is not asked.
func perProcess[T any](s *server, e env.Environment, ids []uint64, what string, ask func([]env.Process) ([]T, error)) ([]T, error) {
	out := make([]T, len(ids))
	var procs []env.Process
	var at []int
	for i, id := range ids {
		p, err := s.process(id)
		if err != nil {
			continue
		}
		procs = append(procs, p)
		at = append(at, i)
	}
	if len(procs) == 0 {
		return out, nil
	}
	got, err := ask(procs)
	if err != nil {
		return nil, err
	}
	if len(got) != len(procs) {
		return nil, fmt.Errorf("plugin: environment %s answered %s for %d processes, not %d; it must answer one per process", e.Name(), what, len(got), len(procs))
	}
	for k, i := range at {
		out[i] = got[k]
	}
	return out, nil
}
