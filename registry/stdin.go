package registry

import (
	"context"
	"errors"
	"fmt"

	"github.com/corralhq/corral/env"
)

// Input: Write, Submit and CloseStdin feed a running process's stdin (a
// pipe or its terminal); Resize changes its terminal's size.

// Write writes data to the process's stdin. The process must be running
// and have been started with Stdin (or a PTY).
func (r *Registry) Write(ctx context.Context, id string, data []byte) error {
	p, h, err := r.running(ctx, id, "write to")
	if err != nil {
		return err
	}
	if _, err := h.Write(ctx, data); err != nil {
		return p.stdinErr("write to", err)
	}
	p.input.clear(true)
	return nil
}

// Submit writes line followed by the key that submits it: "\r" (Enter) on
// a PTY, "\n" on a pipe.
func (r *Registry) Submit(ctx context.Context, id, line string) error {
	p, h, err := r.running(ctx, id, "submit to")
	if err != nil {
		return err
	}
	term := "\n"
	if p.opts.PTY != nil {
		term = "\r"
	}
	if _, err := h.Write(ctx, []byte(line+term)); err != nil {
		return p.stdinErr("submit to", err)
	}
	p.input.clear(true)
	return nil
}

// Resize changes the terminal size of a process started with a PTY, also
// one re-attached after a restart. It fails with ErrInvalidOptions for a
// size of zero and with ErrNotRunning once the process has ended.
func (r *Registry) Resize(ctx context.Context, id string, size env.WindowSize) error {
	if size.Rows == 0 || size.Cols == 0 {
		return fmt.Errorf("%w: window size %dx%d: rows and columns must both be at least 1", ErrInvalidOptions, size.Rows, size.Cols)
	}
	p, h, err := r.running(ctx, id, "resize")
	if err != nil {
		return err
	}
	if p.opts.PTY == nil {
		return fmt.Errorf("%w: resize %s: it has no terminal (start it with a PTY)", ErrInvalidOptions, p.id)
	}
	if err := h.Resize(ctx, size); err != nil {
		if errors.Is(err, env.ErrExited) {
			return fmt.Errorf("registry: resize %s: %w: %w", p.id, ErrNotRunning, err)
		}
		return fmt.Errorf("registry: resize %s: %w", p.id, err)
	}
	return nil
}

// CloseStdin closes the process's stdin so it reads EOF.
func (r *Registry) CloseStdin(ctx context.Context, id string) error {
	p, h, err := r.running(ctx, id, "close stdin of")
	if err != nil {
		return err
	}
	if err := h.CloseStdin(ctx); err != nil {
		return p.stdinErr("close stdin of", err)
	}
	p.input.clear(true)
	return nil
}

// running returns p and its handle once it runs; a process still starting
// or recovering is waited for (bounded by ctx).
func (r *Registry) running(ctx context.Context, id, op string) (*proc, env.Process, error) {
	p, err := r.lookup(id)
	if err != nil {
		return nil, nil, err
	}
	select {
	case <-p.started:
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("registry: cannot %s %s: it is still %s: %w", op, p.id, p.info().State, ctx.Err())
	}
	state, h := p.stateAndHandle()
	if state != StateRunning {
		return nil, nil, fmt.Errorf("%w: cannot %s %s: it is %s", ErrNotRunning, op, p.id, state)
	}
	return p, h, nil
}

func (p *proc) stdinErr(op string, err error) error {
	switch {
	case errors.Is(err, env.ErrExited):
		return fmt.Errorf("registry: %s %s: %w: %w", op, p.id, ErrNotRunning, err)
	case errors.Is(err, env.ErrStdinClosed):
		return fmt.Errorf("registry: %s %s: %w (start it with stdin enabled, and do not close stdin before writing)", op, p.id, err)
	}
	return fmt.Errorf("registry: %s %s: %w", op, p.id, err)
}
