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
	out, err := perProcess(s, e, req.GetProcessIds(), "tree stats", func(procs []env.Process) ([]*env.TreeStats, error) {
		return ts.TreeStats(ctx, procs)
	})
	if err != nil {
		return nil, wire.ToStatus(err)
	}
	return wire.TreeStatsToProto(out), nil
}

// capsToProto is the Environment's capabilities as they cross the wire,
// with what only the wire states: whether it measures process trees.
func capsToProto(e env.Environment) *pb.Capabilities {
	c := wire.CapsToProto(e.Capabilities())
	_, c.TreeStats = e.(env.TreeStatter)
	_, iw := e.(env.InputWatcher)
	c.InputWait = c.InputWait && iw
	return c
}
