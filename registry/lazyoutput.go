package registry

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/env"
)

// Lazy output: a process restored in a final state keeps its output in
// the sandbox until someone needs it (Poll from an offset before its end,
// Log), and then it is read back into the buffer once.

// outputLoadTimeout bounds reading back the output of a process that had
// finished before the restart (loadOutput).
const outputLoadTimeout = 30 * time.Second

// lazyOutput is the output of a process restored in a final state: the
// size the checkpoint recorded, and whether the buffer holds it yet.
type lazyOutput struct {
	bytes  int64         // output_bytes of the record
	turn   chan struct{} // (1) held while the buffer is filled from the sandbox
	loaded atomic.Bool   // the buffer holds what the sandbox had
	err    error         // under turn: why the output can never be read back
}

// outputTurn serialises the writers of a restored process's buffer
// (loadOutput, and catchUp for a tree still followed), so that each
// continues where the other stopped. It is a no-op for other processes,
// whose buffer only their monitor writes.
func (p *proc) outputTurn(ctx context.Context) (release func(), err error) {
	if p.lazy == nil {
		return func() {}, nil
	}
	select {
	case p.lazy.turn <- struct{}{}:
		return func() { <-p.lazy.turn }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("registry: output of %s: %w", p.id, ctx.Err())
	case <-p.r.ctx.Done():
		return nil, fmt.Errorf("registry: output of %s: %w", p.id, ErrClosed)
	}
}

// loadOutput makes sure the buffer of a process restored in a final state
// holds its output from byte from on: the first call that needs bytes the
// buffer lacks reads them back from the sandbox; concurrent callers wait
// for it, later ones find the buffer full. An error says why the output
// cannot be had; an output that is gone for good (its state in the
// sandbox removed, the process never detached) is reported so every time
// without asking the sandbox again.
func (p *proc) loadOutput(ctx context.Context, from int64) error {
	l := p.lazy
	if l == nil || l.loaded.Load() || from >= l.bytes {
		return nil
	}
	release, err := p.outputTurn(ctx)
	if err != nil {
		return err
	}
	defer release()
	if l.loaded.Load() {
		return nil
	}
	if l.err != nil {
		return l.err
	}
	err = p.readBack(ctx)
	if err == nil {
		l.loaded.Store(true)
		return nil
	}
	if errors.Is(err, env.ErrNotFound) || errors.Is(err, env.ErrSandboxGone) || errors.Is(err, env.ErrUnsupported) {
		l.err = err
	}
	p.r.log.Debug("read back the output of a finished process", "id", p.id, "err", err)
	return err
}

// readBack copies the output of a restored process into its buffer, from
// the buffer's end on (a read that failed half-way is continued, not
// repeated).
func (p *proc) readBack(ctx context.Context) error {
	what := fmt.Sprintf("registry: output of %s (%d bytes; it ended before the supervisor restarted)", p.id, p.lazy.bytes)
	if p.ref == nil {
		return fmt.Errorf("%s: not kept: it was not started detached (a PTY, or a backend without re-attach), so only the supervisor before the restart held it: %w",
			what, env.ErrUnsupported)
	}
	ctx, cancel := context.WithTimeout(ctx, outputLoadTimeout)
	defer cancel()
	defer context.AfterFunc(p.r.ctx, cancel)()
	h, err := p.sandboxHandle(ctx)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", what, goneWords(err), err)
	}
	rd, err := h.Output(ctx, p.buf.Total())
	if err != nil {
		return fmt.Errorf("%s: %s: %w", what, goneWords(err), err)
	}
	defer rd.Close()
	// Output's reader honours its context only when opened; close it
	// when the context ends, so a stuck stream cannot hold the caller.
	defer context.AfterFunc(ctx, func() { rd.Close() })()
	if err := p.copyOutput(rd); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("%s: reading it back from the sandbox: %w", what, err)
	}
	return nil
}

// goneWords says what an error of the sandbox means for a restored
// process's output.
func goneWords(err error) string {
	switch {
	case errors.Is(err, env.ErrNotFound):
		return "the sandbox no longer holds it (the process's state there was removed)"
	case errors.Is(err, env.ErrSandboxGone):
		return "its sandbox is gone"
	}
	return "cannot read it back from the sandbox"
}

// sandboxHandle returns p's handle on its process in the sandbox. A
// process restored in a final state is attached on first use (nil when
// it has no Ref: there is nothing in the sandbox to reach).
func (p *proc) sandboxHandle(ctx context.Context) (env.Process, error) {
	h, ref := p.handleAndRef()
	if h != nil || ref == nil || p.lazy == nil {
		return h, nil
	}
	h, err := p.r.attach(ctx, p.backend, *ref)
	if err != nil {
		return nil, err
	}
	// Attached concurrently: keep one handle.
	return p.keepHandle(h), nil
}
