package plugins

import (
	"context"
	"errors"
	"fmt"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/plugins/internal/wire"
	pb "github.com/corralhq/corral/plugins/proto"
)

var _ env.TreeStatter = (*Env)(nil)

// TreeStats implements env.TreeStatter with one TreeStats call for every
// tree. The method is always there (the host cannot know the plugin before
// it runs), so a plugin that does not measure — its Environment lacks
// env.TreeStatter, which Open's tree_stats said, or it was built before
// the call and answers Unimplemented — gets an error matching
// env.ErrUnsupported and no call: the backend is then not measuring, as
// for a wrapper (the daemon's) whose Environment does not measure.
func (e *Env) TreeStats(ctx context.Context, procs []env.Process) ([]*env.TreeStats, error) {
	if !e.treeStats.Load() {
		return nil, e.noTreeStats()
	}
	out := make([]*env.TreeStats, len(procs))
	byConn, ids, err := e.groupByConn(ctx, procs)
	if err != nil {
		return nil, err
	}
	for c, at := range byConn {
		req := &pb.TreeStatsRequest{ProcessIds: make([]uint64, len(at))}
		for k, i := range at {
			req.ProcessIds[k] = ids[i]
		}
		resp, err := c.rpc.TreeStats(ctx, req)
		if err != nil {
			err = e.fail(c, "tree stats", err)
			if errors.Is(err, env.ErrUnsupported) {
				// Built before the call, or its Environment stopped
				// measuring: stop asking.
				e.treeStats.Store(false)
				e.log.Debug("the plugin does not measure process trees", "err", err)
				return nil, e.noTreeStats()
			}
			return nil, err
		}
		trees := resp.GetTrees()
		if len(trees) != len(at) {
			return nil, fmt.Errorf("plugin %s: tree stats: answered %d trees for %d processes; the plugin is faulty, report it to its author",
				e.found.Name, len(trees), len(at))
		}
		for k, i := range at {
			out[i] = wire.TreeStatFromProto(trees[k])
		}
	}
	return out, nil
}

func (e *Env) noTreeStats() error {
	return fmt.Errorf("plugin %s does not measure process trees (its environment cannot, or it was built with an SDK older than tree stats): %w",
		e.found.Name, env.ErrUnsupported)
}

// groupByConn groups the processes of procs that are this Env's by the
// plugin connection that holds them, as positions in procs, and returns
// each one's handle ID at its position. Handles are bound to the plugin
// process that minted them; after a restart a handle re-attaches, so they
// nearly always share one conn. Another Environment's process, a released
// one and one lost with a plugin process that died (not detached) are
// left out: there is nothing to ask about them.
func (e *Env) groupByConn(ctx context.Context, procs []env.Process) (map[*conn][]int, []uint64, error) {
	byConn := make(map[*conn][]int)
	ids := make([]uint64, len(procs))
	for i, proc := range procs {
		p, ok := proc.(*process)
		if !ok || p.e != e {
			continue
		}
		c, id, err := p.handle(ctx)
		switch {
		case err == nil:
		case errors.Is(err, env.ErrReleased), errors.Is(err, env.ErrNotFound):
			continue
		default:
			return nil, nil, err
		}
		ids[i] = id
		byConn[c] = append(byConn[c], i)
	}
	return byConn, ids, nil
}
