package plugins

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/plugins/internal/wire"
	pb "github.com/corralhq/corral/plugins/proto"
)

// The ports calls cross the boundary as they are (EnvListeners, Listeners,
// WaitListening, CheckURL). A plugin without them (built with an older
// SDK) answers Unimplemented, which wire.FromStatus turns into
// env.ErrUnsupported, as does a plugin whose Environment lacks them;
// Capabilities.Ports and CheckURL say so in advance.

var (
	_ env.PortLister    = (*Env)(nil)
	_ env.URLChecker    = (*Env)(nil)
	_ env.HealthChecker = (*Env)(nil)
	_ env.PortLister    = (*process)(nil)
	_ env.PortWaiter    = (*process)(nil)
)

// Listeners implements env.PortLister for the whole sandbox.
func (e *Env) Listeners(ctx context.Context) ([]env.Listener, error) {
	c, err := e.conn(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := c.rpc.EnvListeners(ctx, &pb.Empty{})
	if err != nil {
		return nil, e.fail(c, "listeners", err)
	}
	return wire.ListenersFromProto(resp), nil
}

// CheckURL implements env.URLChecker.
func (e *Env) CheckURL(ctx context.Context, rawURL string) (int, error) {
	if err := env.ValidateCheckURL(rawURL); err != nil {
		return 0, err
	}
	c, err := e.conn(ctx)
	if err != nil {
		return 0, err
	}
	resp, err := c.rpc.CheckURL(ctx, &pb.CheckURLRequest{Url: rawURL})
	if err != nil {
		return 0, e.fail(c, "check url", err)
	}
	return int(resp.GetStatus()), nil
}

// Listeners implements env.PortLister for the process's tree.
func (p *process) Listeners(ctx context.Context) ([]env.Listener, error) {
	c, id, err := p.handle(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := c.rpc.Listeners(ctx, &pb.ProcessRequest{ProcessId: id})
	if err != nil {
		return nil, p.e.fail(c, p.op("listeners"), err)
	}
	return wire.ListenersFromProto(resp), nil
}

// WaitListening implements env.PortWaiter with the plugin's own wait (one
// call that lasts until the tree listens). A plugin whose process cannot
// wait, but can list, is polled with Listeners, at the registry's pace
// (an interval of a fiftieth of the wait so far, from 20ms to 1s).
func (p *process) WaitListening(ctx context.Context, ports []int) ([]env.Listener, error) {
	var ps []int32
	for _, port := range ports {
		if err := env.ValidatePort(port); err != nil {
			return nil, fmt.Errorf("plugin %s: %s: %w", p.e.found.Name, p.op("wait listening"), err)
		}
		ps = append(ps, int32(port))
	}
	c, id, err := p.handle(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := c.rpc.WaitListening(ctx, &pb.WaitListeningRequest{ProcessId: id, Ports: ps})
	switch {
	case err == nil:
		return wire.ListenersFromProto(resp), nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	}
	if err = p.e.fail(c, p.op("wait listening"), err); !errors.Is(err, env.ErrUnsupported) {
		return nil, err
	}
	began := time.Now()
	for {
		ls, err := p.Listeners(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		for _, l := range ls {
			for _, port := range ports {
				if l.Port == port {
					return ls, nil
				}
			}
		}
		t := time.NewTimer(min(max(time.Since(began)/50, 20*time.Millisecond), time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// Health implements env.HealthChecker: the plugin's own check (Health),
// within ctx. A plugin that cannot be reached, or does not answer in time,
// is unreachable; one whose process died is started again by the check, as
// by any call. A plugin without the call (an older SDK) answered: it is ok.
func (e *Env) Health(ctx context.Context) env.Health {
	c, err := e.conn(ctx)
	if err != nil {
		return env.Health{Condition: env.ConditionUnreachable, Detail: clipHealth(err.Error())}
	}
	resp, err := c.rpc.Health(ctx, &pb.Empty{})
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return env.Health{Condition: env.ConditionUnreachable, Detail: fmt.Sprintf("plugin %s did not answer a health check in time", e.found.Name)}
	default:
		err = e.fail(c, "health", err)
		if errors.Is(err, env.ErrUnsupported) {
			return env.Health{Condition: env.ConditionOK}
		}
		return env.Health{Condition: env.ConditionUnreachable, Detail: clipHealth(err.Error())}
	}
	switch cond := env.Condition(resp.GetCondition()); cond {
	case env.ConditionOK, env.ConditionPaused, env.ConditionUnreachable, env.ConditionGone:
		return env.Health{Condition: cond, Detail: clipHealth(resp.GetDetail())}
	default:
		return env.Health{Condition: env.ConditionUnreachable,
			Detail: fmt.Sprintf("plugin %s reported an unknown condition %.40q", e.found.Name, resp.GetCondition())}
	}
}

// clipHealth keeps a health detail from a plugin to one short line.
func clipHealth(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 200 {
		s = string(r[:200]) + "…"
	}
	return s
}
