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
	out, err := askEachConn(ctx, e, procs, "tree stats", func(c *conn, ids []uint64) ([]*env.TreeStats, error) {
		resp, err := c.rpc.TreeStats(ctx, &pb.TreeStatsRequest{ProcessIds: ids})
		if err != nil {
			return nil, err
		}
		trees := make([]*env.TreeStats, len(resp.GetTrees()))
		for k, t := range resp.GetTrees() {
			trees[k] = wire.TreeStatFromProto(t)
		}
		return trees, nil
	})
	if errors.Is(err, env.ErrUnsupported) {
		// Built before the call, or its Environment stopped measuring:
		// stop asking.
		e.treeStats.Store(false)
		e.log.Debug("the plugin does not measure process trees", "err", err)
		return nil, e.noTreeStats()
	}
	return out, err
}

// askEachConn makes one call per plugin connection about the processes of
// procs it holds (groupByConn) and returns one answer per process, the
// zero R for the others. call gets the handle IDs and must answer one R
// per ID; what names the call in errors.
func askEachConn[R any](ctx context.Context, e *Env, procs []env.Process, what string, call func(c *conn, ids []uint64) ([]R, error)) ([]R, error) {
	out := make([]R, len(procs))
	byConn, ids, err := e.groupByConn(ctx, procs)
	if err != nil {
		return nil, err
	}
	for c, at := range byConn {
		req := make([]uint64, len(at))
		for k, i := range at {
			req[k] = ids[i]
		}
		got, err := call(c, req)
		if err != nil {
			return nil, e.fail(c, what, err)
		}
		if len(got) != len(at) {
			return nil, fmt.Errorf("plugin %s: %s: answered for %d processes, not %d; the plugin is faulty, report it to its author",
				e.found.Name, what, len(got), len(at))
		}
		for k, i := range at {
			out[i] = got[k]
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
