//go:build !linux

package local

import (
	"context"
	"fmt"

	"github.com/corralhq/corral/env"
)

// errNoSockets is returned where the platform has no socket tables to read.
var errNoSockets = fmt.Errorf("listening sockets are read from Linux's /proc: %w", env.ErrUnsupported)

// Listeners needs Linux's /proc.
func (e *Env) Listeners(ctx context.Context) ([]env.Listener, error) {
	return nil, fmt.Errorf("local: listeners: %w", errNoSockets)
}

// treeListeners needs Linux's /proc.
func treeListeners([]int) ([]env.Listener, error) { return nil, errNoSockets }
