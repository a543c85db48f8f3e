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
	out, err := askEachConn(ctx, e, procs, "input waits", func(c *conn, ids []uint64) ([]*env.InputWait, error) {
		resp, err := c.rpc.InputWaits(ctx, &pb.InputWaitsRequest{ProcessIds: ids})
		if err != nil {
			return nil, err
		}
		waits := make([]*env.InputWait, len(resp.GetKinds()))
		for k, kind := range resp.GetKinds() {
			waits[k] = wire.InputWaitFromProto(kind)
		}
		return waits, nil
	})
	if errors.Is(err, env.ErrUnsupported) {
		e.inputWait.Store(false)
		e.log.Debug("the plugin cannot tell input waits", "err", err)
		return nil, e.noInputWaits()
	}
	return out, err
}

func (e *Env) noInputWaits() error {
	return fmt.Errorf("plugin %s cannot tell input waits (its environment cannot, or it was built with an SDK older than input waits): %w",
		e.found.Name, env.ErrUnsupported)
}
