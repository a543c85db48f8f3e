package plugins

import (
	"context"
	"errors"
	"fmt"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/plugins/internal/wire"
	pb "github.com/corralhq/corral/plugins/proto"
)

var _ env.InputWatcher = (*Env)(nil)

// InputWaits implements env.InputWatcher with one InputWaits call for
// every process. As with TreeStats, the method is always there: a plugin
// whose Environment cannot tell (its Open answered input_wait false), or
// built before the call (Unimplemented), gets an error matching
// env.ErrUnsupported and no call, and the registry stops asking.
func (e *Env) InputWaits(ctx context.Context, procs []env.Process) ([]*env.InputWait, error) {
	if !e.inputWait.Load() {
		return nil, e.noInputWaits()
	}
	out := make([]*env.InputWait, len(procs))
	byConn, ids, err := e.groupByConn(ctx, procs)
	if err != nil {
		return nil, err
	}
	for c, at := range byConn {
		req := &pb.InputWaitsRequest{ProcessIds: make([]uint64, len(at))}
		for k, i := range at {
			req.ProcessIds[k] = ids[i]
		}
		resp, err := c.rpc.InputWaits(ctx, req)
		if err != nil {
			err = e.fail(c, "input waits", err)
			if errors.Is(err, env.ErrUnsupported) {
				e.inputWait.Store(false)
				e.log.Debug("the plugin cannot tell input waits", "err", err)
				return nil, e.noInputWaits()
			}
			return nil, err
		}
		kinds := resp.GetKinds()
		if len(kinds) != len(at) {
			return nil, fmt.Errorf("plugin %s: input waits: answered %d for %d processes; the plugin is faulty, report it to its author",
				e.found.Name, len(kinds), len(at))
		}
		for k, i := range at {
			out[i] = wire.InputWaitFromProto(kinds[k])
		}
	}
	return out, nil
}

func (e *Env) noInputWaits() error {
	return fmt.Errorf("plugin %s cannot tell input waits (its environment cannot, or it was built with an SDK older than input waits): %w",
		e.found.Name, env.ErrUnsupported)
}
