//go:build !linux

package local

import (
	"context"
	"fmt"

	"github.com/corralhq/corral/env"
)

// detached processes need the Linux shim (a child subreaper); elsewhere
// there are none, and this type only keeps the Env bookkeeping uniform.
type detached struct{ env.Process }

func (d *detached) Release() error { return nil }

// shimClient connects to the shim server of detached processes, which
// only Linux has.
type shimClient struct{ stateDir string }

func (c *shimClient) close() {}

// dirHub watches process directories, which only Linux has.
type dirHub struct{}

func (h *dirHub) close() {}

func (e *Env) startDetached(context.Context, env.Spec) (*detached, error) {
	return nil, fmt.Errorf("local: start: detached processes need Linux: %w", env.ErrUnsupported)
}

func (e *Env) attach(env.Ref) (*detached, error) {
	return nil, fmt.Errorf("local: attach: detached processes need Linux: %w", env.ErrUnsupported)
}
