package sdk

import (
	"context"
	"fmt"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/plugins/internal/wire"
	pb "github.com/corralhq/corral/plugins/proto"
)

// TreeStats serves env.TreeStatter when the plugin's Environment
// implements it (an Environment from ServeTransport does once env/nohup
// measures), and answers ErrUnsupported otherwise, as Capabilities'
// tree_stats said in advance.
func (s *server) TreeStats(ctx context.Context, req *pb.TreeStatsRequest) (*pb.TreeStatsResponse, error) {
	e, err := s.environment()
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	ts, ok := e.(env.TreeStatter)
	if !ok {
		return nil, wire.ToStatus(fmt.Errorf("plugin: environment %s does not measure process trees: %w", e.Name(), env.ErrUnsupported))
	}
	ids := req.GetProcessIds()
	out := make([]*env.TreeStats, len(ids))
	// A handle the plugin does not know (released, or minted by an earlier
	// plugin process) has no tree here: it stays nil, and the Environment
	// is asked only about its own processes.
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
	if len(procs) > 0 {
		got, err := ts.TreeStats(ctx, procs)
		if err != nil {
			return nil, wire.ToStatus(err)
		}
		if len(got) != len(procs) {
			return nil, wire.ToStatus(fmt.Errorf("plugin: environment %s measured %d trees for %d processes; its TreeStats must answer one per process", e.Name(), len(got), len(procs)))
		}
		for k, i := range at {
			out[i] = got[k]
		}
	}
	return wire.TreeStatsToProto(out), nil
}

// capsToProto is the Environment's capabilities as they cross the wire,
// with what only the wire states: whether it measures process trees.
func capsToProto(e env.Environment) *pb.Capabilities {
	c := wire.CapsToProto(e.Capabilities())
	_, c.TreeStats = e.(env.TreeStatter)
	return c
}
