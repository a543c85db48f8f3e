package plugins

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/plugins/internal/wire"
	pb "github.com/corralhq/corral/plugins/proto"
)

// A process started through the Run call lives on one gRPC stream: the
// spec goes out as its first message, the handle comes back, a wait
// request is answered with the exit status, and cancelling the stream
// releases the handle (see backend.proto). Between two processes on one
// machine, what a call costs is mostly wake-ups — each message wakes the
// other side's reader, a handler goroutine, a writer — not bytes: one
// stream instead of Start, Wait and Release calls saves two new streams
// with their handlers and two responses per process.

// errNoRun says that the plugin predates the Run call.
var errNoRun = errors.New("plugin does not implement Run")

// noRun reports the answer of a plugin built before Run: a bare
// Unimplemented (an Environment's ErrUnsupported carries details).
func noRun(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unimplemented && len(st.Details()) == 0
}

// runStream is the Run stream of one process. Its context is none of the
// caller's: the stream outlives the Start that opened it.
type runStream struct {
	c      *conn
	stream pb.Backend_RunClient
	cancel context.CancelFunc

	mu    sync.Mutex
	asked bool          // the wait request is sent and its receiver runs
	done  chan struct{} // closed once ev or err is set
	ev    *pb.RunEvent
	err   error
}

// run starts spec on a Run stream.
func (e *Env) run(ctx context.Context, c *conn, spec env.Spec) (*process, error) {
	r, err := c.takeRun(ctx)
	if err != nil {
		if noRun(err) {
			return nil, errNoRun
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("plugin %s: start: %w", e.found.Name, ctx.Err())
		}
		return nil, e.fail(c, "start", err)
	}
	stop := context.AfterFunc(ctx, r.cancel)
	var ev *pb.RunEvent
	err = r.stream.Send(&pb.RunRequest{Spec: wire.SpecToProto(spec)})
	if err == nil || errors.Is(err, io.EOF) {
		// On io.EOF the stream has ended: Recv returns its status.
		ev, err = r.stream.Recv()
	}
	if !stop() {
		// ctx ended the start and the stream: a process the plugin
		// started meanwhile is released with it.
		return nil, fmt.Errorf("plugin %s: start: %w", e.found.Name, ctx.Err())
	}
	if err != nil {
		r.cancel()
		if noRun(err) {
			return nil, errNoRun
		}
		return nil, e.fail(c, "start", err)
	}
	c.prepareRun()
	p := e.newProcess(c, ev.GetStarted())
	p.run = r
	return p, nil
}

// wait asks for the exit status (once) and waits for the answer or for
// ctx. The answer is received in a goroutine of its own, so that a Wait
// whose ctx ends leaves the stream intact for the next Wait.
func (r *runStream) wait(ctx context.Context) (*pb.RunEvent, error) {
	r.mu.Lock()
	if !r.asked {
		r.asked = true
		// A failed Send means the stream has ended; Recv says why.
		_ = r.stream.Send(&pb.RunRequest{Wait: true})
		go func() {
			r.ev, r.err = r.stream.Recv()
			close(r.done)
		}()
	}
	r.mu.Unlock()
	select {
	case <-r.done:
		return r.ev, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// openRun opens a Run stream; ctx bounds the opening only.
func (c *conn) openRun(ctx context.Context) (*runStream, error) {
	sctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	stream, err := c.rpc.Run(sctx)
	if !stop() {
		return nil, ctx.Err()
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &runStream{c: c, stream: stream, cancel: cancel, done: make(chan struct{})}, nil
}

// takeRun returns the Run stream opened ahead, or a new one.
func (c *conn) takeRun(ctx context.Context) (*runStream, error) {
	c.spareMu.Lock()
	r := c.spare
	c.spare = nil
	c.spareMu.Unlock()
	if r != nil {
		return r, nil
	}
	return c.openRun(ctx)
}

// prepareRun opens the Run stream that the next Start will use. Opening a
// stream costs its headers and, in the plugin, their parsing and a new
// handler goroutine: done now, while the process just started runs, that
// is off the next Start's path.
//
// The stream is opened outside spareMu, so a concurrent Start's takeRun
// never waits for it; a stream that turns out not to be needed (another
// Start stored one first, or the conn is closing) is ended again.
func (c *conn) prepareRun() {
	c.spareMu.Lock()
	skip := c.spare != nil || c.noSpare
	c.spareMu.Unlock()
	if skip {
		return
	}
	r, err := c.openRun(context.Background())
	if err != nil {
		return
	}
	c.spareMu.Lock()
	defer c.spareMu.Unlock()
	if c.spare != nil || c.noSpare {
		r.cancel()
		return
	}
	c.spare = r
}

// dropRun ends the Run stream opened ahead, for good: the conn is closing.
func (c *conn) dropRun() {
	c.spareMu.Lock()
	defer c.spareMu.Unlock()
	c.noSpare = true
	if c.spare != nil {
		c.spare.cancel()
		c.spare = nil
	}
}
