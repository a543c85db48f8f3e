package plugins

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/plugins/internal/wire"
	pb "github.com/corralhq/corral/plugins/proto"
)

// restartBackoff is the least time between two starts of a plugin that
// keeps failing, so a broken plugin is not restarted on every call.
const restartBackoff = 500 * time.Millisecond

// Open starts the plugin that target's scheme names (NAME://…), hands it
// the whole target, and returns its Environment. The plugin process lives
// until Close; if it dies, the next call starts a new one (see the package
// doc).
func Open(ctx context.Context, target string, opts Options) (env.Environment, error) {
	opts = opts.withDefaults()
	name, _, ok := strings.Cut(target, "://")
	if !ok {
		return nil, fmt.Errorf("plugins: target %q: want NAME://…", target)
	}
	return OpenPlugin(ctx, name, target, opts)
}

// OpenPlugin is Open with the plugin named: for a plugin that serves
// several schemes (corral-backend-k8s serves k8s:// and k8s-pod://).
func OpenPlugin(ctx context.Context, name, target string, opts Options) (env.Environment, error) {
	opts = opts.withDefaults()
	f, err := Find(name, opts)
	if err != nil {
		return nil, err
	}
	return openFound(ctx, f, target, opts)
}

func openFound(ctx context.Context, f Found, target string, opts Options) (*Env, error) {
	e := &Env{found: f, target: target, opts: opts, log: opts.Logger.With("plugin", f.Name)}
	c, err := e.connect(ctx)
	if err != nil {
		return nil, err
	}
	e.cur = c
	return e, nil
}

// Env is an env.Environment served by a plugin process.
type Env struct {
	found  Found
	target string
	opts   Options
	log    *slog.Logger

	// name and caps come from the first Open; a restarted plugin is
	// expected to report the same.
	name string
	caps env.Capabilities
	// treeStats: the plugin's Environment measures process trees (its
	// Open answered tree_stats), until a TreeStats call says it does not.
	treeStats atomic.Bool
	// inputWait: the plugin's Environment tells input waits (its Open
	// answered input_wait), until an InputWaits call says it does not.
	inputWait atomic.Bool

	mu        sync.Mutex
	cur       *conn
	gens      uint64
	closed    bool
	lastFail  time.Time
	lastErr   error
	restartMu sync.Mutex     // one restart at a time
	pending   sync.WaitGroup // asynchronous Releases in flight
}

var _ env.Environment = (*Env)(nil)

// connect starts a new plugin process and opens the target in it.
func (e *Env) connect(ctx context.Context) (*conn, error) {
	e.mu.Lock()
	e.gens++
	gen := e.gens
	e.mu.Unlock()
	c, err := startPlugin(ctx, e.found, e.opts, gen)
	if err != nil {
		return nil, err
	}
	resp, err := c.rpc.Open(ctx, &pb.OpenRequest{Target: e.target})
	if err != nil {
		c.kill()
		return nil, wire.FromStatus(fmt.Sprintf("plugin %s: open %q", e.found.Name, e.target), err)
	}
	if e.name == "" {
		e.name = resp.GetName()
		e.caps = wire.CapsFromProto(resp.GetCapabilities())
		if len(e.caps.Limits) == 0 && e.caps.LimitsNote == "" {
			// A plugin built before limits crossed the protocol.
			e.caps.LimitsNote = pluginLimitsNote
		}
		e.treeStats.Store(resp.GetCapabilities().GetTreeStats())
		e.inputWait.Store(resp.GetCapabilities().GetInputWait())
	}
	return c, nil
}

// conn returns the live plugin connection, starting a new plugin process
// when the last one died.
func (e *Env) conn(ctx context.Context) (*conn, error) {
	e.mu.Lock()
	c, closed := e.cur, e.closed
	e.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("plugin %s: %w", e.found.Name, env.ErrReleased)
	}
	if c != nil && c.alive() {
		return c, nil
	}
	e.restartMu.Lock()
	defer e.restartMu.Unlock()
	e.mu.Lock()
	c, closed = e.cur, e.closed
	if !closed && c != nil && c.alive() {
		e.mu.Unlock()
		return c, nil
	}
	if !closed && time.Since(e.lastFail) < restartBackoff {
		err := e.lastErr
		e.mu.Unlock()
		return nil, err
	}
	e.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("plugin %s: %w", e.found.Name, env.ErrReleased)
	}
	if c != nil {
		c.kill()
	}
	e.log.Warn("plugin died; starting a new plugin process", "target", e.target)
	nc, err := e.connect(ctx)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		err = fmt.Errorf("plugin %s: restart: %w", e.found.Name, err)
		if !errors.Is(err, env.ErrUnavailable) {
			err = fmt.Errorf("%w (%w)", err, env.ErrUnavailable)
		}
		e.lastFail, e.lastErr = time.Now(), err
		return nil, err
	}
	if e.closed {
		nc.kill()
		return nil, fmt.Errorf("plugin %s: %w", e.found.Name, env.ErrReleased)
	}
	e.cur = nc
	return nc, nil
}

// fail converts an RPC error and, when it says the plugin is unreachable,
// marks c dead so the next call starts a new plugin.
func (e *Env) fail(c *conn, op string, err error) error {
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unavailable && len(st.Details()) == 0 {
		c.markDead()
	}
	return wire.FromStatus(fmt.Sprintf("plugin %s: %s", e.found.Name, op), err)
}

// Name returns the plugin Environment's own name.
func (e *Env) Name() string { return e.name }

// Capabilities returns what the plugin reported when it was opened.
func (e *Env) Capabilities() env.Capabilities { return e.caps }

// PluginPID is the PID of the current plugin process (0 when none runs),
// for diagnostics.
func (e *Env) PluginPID() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cur == nil || !e.cur.alive() {
		return 0
	}
	return e.cur.pid
}

// Path is the plugin binary.
func (e *Env) Path() string { return e.found.Path }

// Start starts spec in the plugin's Environment.
// pluginLimitsNote says why a plugin that states nothing of limits (one
// built before they crossed the protocol) refuses them.
const pluginLimitsNote = "this plugin states no per-process limits it enforces (built before corral's plugin protocol carried them); rebuild it with the current SDK"

func (e *Env) Start(ctx context.Context, spec env.Spec) (env.Process, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("plugin %s: start: %w", e.found.Name, err)
	}
	if spec.Limits != nil {
		// Refused here what the plugin does not state it enforces: a
		// plugin built before limits crossed the protocol would drop them.
		if err := env.CheckLimits(e.name, e.caps, *spec.Limits); err != nil {
			return nil, err
		}
	}
	c, err := e.conn(ctx)
	if err != nil {
		return nil, err
	}
	if !c.noRun.Load() {
		p, err := e.run(ctx, c, spec)
		switch {
		case err == nil:
			return p, nil
		case !errors.Is(err, errNoRun):
			return nil, err
		}
		c.noRun.Store(true)
	}
	resp, err := c.rpc.Start(ctx, &pb.StartRequest{Spec: wire.SpecToProto(spec)})
	if err != nil {
		return nil, e.fail(c, "start", err)
	}
	return e.newProcess(c, resp), nil
}

// Attach re-attaches to a detached process by its Ref.
func (e *Env) Attach(ctx context.Context, ref env.Ref) (env.Process, error) {
	c, err := e.conn(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := c.rpc.Attach(ctx, &pb.AttachRequest{Ref: wire.RefToProto(ref)})
	if err != nil {
		return nil, e.fail(c, "attach", err)
	}
	return e.newProcess(c, resp), nil
}

func (e *Env) newProcess(c *conn, resp *pb.ProcessResponse) *process {
	p := &process{e: e, pid: int(resp.GetPid()), c: c, id: resp.GetProcessId()}
	if resp.GetRef() != nil {
		ref := wire.RefFromProto(resp.GetRef())
		p.ref = &ref
	}
	return p
}

// Close closes the plugin's Environment and stops the plugin process.
func (e *Env) Close() error {
	e.restartMu.Lock()
	defer e.restartMu.Unlock()
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	c := e.cur
	e.mu.Unlock()
	e.pending.Wait()
	if c == nil {
		return nil
	}
	c.dropRun()
	var err error
	if c.alive() {
		// Close may kill a process tree: give it the time the local
		// backend documents (10 s) and some.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err = c.rpc.Close(ctx, &pb.Empty{})
		cancel()
		if err != nil {
			err = e.fail(c, "close", err)
		}
	}
	c.kill()
	return err
}

// process is a handle on a process of the plugin. It is bound to the plugin
// generation that minted its ID; after a plugin restart it re-attaches by
// its Ref on first use.
type process struct {
	e   *Env
	pid int
	ref *env.Ref // nil: not detached, lost if the plugin dies

	mu       sync.Mutex
	c        *conn
	id       uint64
	run      *runStream // the Run stream it lives on, if Run started it on c
	released bool
}

var _ env.Process = (*process)(nil)

// handle returns the connection and ID to use now, re-attaching after a
// plugin restart.
func (p *process) handle(ctx context.Context) (*conn, uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released {
		return nil, 0, fmt.Errorf("plugin %s: process %d: %w", p.e.found.Name, p.pid, env.ErrReleased)
	}
	if p.c.alive() {
		return p.c, p.id, nil
	}
	c, err := p.e.conn(ctx)
	if err != nil {
		return nil, 0, err
	}
	if p.ref == nil {
		return nil, 0, fmt.Errorf("plugin %s: process %d was not detached and was lost with the plugin process that ran it: %w",
			p.e.found.Name, p.pid, env.ErrNotFound)
	}
	resp, err := c.rpc.Attach(ctx, &pb.AttachRequest{Ref: wire.RefToProto(*p.ref)})
	if err != nil {
		return nil, 0, p.e.fail(c, "re-attach after plugin restart", err)
	}
	if p.run != nil {
		// Its plugin is gone: the stream is dead and has no handle to
		// release; the new handle is served by plain calls.
		p.run.cancel()
		p.run = nil
	}
	p.c, p.id = c, resp.GetProcessId()
	return c, p.id, nil
}

func (p *process) op(name string) string { return fmt.Sprintf("process %d: %s", p.pid, name) }

func (p *process) PID() int { return p.pid }

func (p *process) Output(ctx context.Context, offset int64) (io.ReadCloser, error) {
	if offset < 0 {
		return nil, fmt.Errorf("plugin %s: %s: negative offset %d", p.e.found.Name, p.op("output"), offset)
	}
	if _, _, err := p.handle(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	return &outputReader{p: p, ctx: ctx, cancel: cancel, off: offset}, nil
}

func (p *process) Write(ctx context.Context, b []byte) (int, error) {
	written := 0
	for len(b) > 0 || written == 0 {
		chunk := b[:min(len(b), wire.OutputChunkSize)]
		c, id, err := p.handle(ctx)
		if err != nil {
			return written, err
		}
		resp, err := c.rpc.Write(ctx, &pb.WriteRequest{ProcessId: id, Data: chunk})
		if err != nil {
			return written, p.e.fail(c, p.op("write"), err)
		}
		written += int(resp.GetWritten())
		b = b[len(chunk):]
		if len(b) == 0 {
			break
		}
	}
	return written, nil
}

func (p *process) CloseStdin(ctx context.Context) error {
	c, id, err := p.handle(ctx)
	if err != nil {
		return err
	}
	if _, err := c.rpc.CloseStdin(ctx, &pb.ProcessRequest{ProcessId: id}); err != nil {
		return p.e.fail(c, p.op("close stdin"), err)
	}
	return nil
}

func (p *process) Signal(ctx context.Context, sig env.Signal) error {
	c, id, err := p.handle(ctx)
	if err != nil {
		return err
	}
	if _, err := c.rpc.Signal(ctx, &pb.SignalRequest{ProcessId: id, Signal: string(sig)}); err != nil {
		return p.e.fail(c, p.op("signal "+sig.String()), err)
	}
	return nil
}

func (p *process) Survivors(ctx context.Context) ([]int, error) {
	c, id, err := p.handle(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := c.rpc.Survivors(ctx, &pb.ProcessRequest{ProcessId: id})
	if err != nil {
		return nil, p.e.fail(c, p.op("survivors"), err)
	}
	out := make([]int, len(resp.GetPids()))
	for i, pid := range resp.GetPids() {
		out[i] = int(pid)
	}
	return out, nil
}

// Wait returns the exit status, or env.NoStatus with an error: a Wait cut
// by the plugin's death fails with an error matching env.ErrUnavailable and
// no status, which cannot be misread as "exit status 0".
func (p *process) Wait(ctx context.Context) (env.ExitStatus, error) {
	c, id, err := p.handle(ctx)
	if err != nil {
		return env.NoStatus, err
	}
	p.mu.Lock()
	run := p.run
	p.mu.Unlock()
	if run != nil && run.c == c {
		ev, err := run.wait(ctx)
		switch {
		case err == nil && ev.GetExited() != nil:
			return wire.StatusFromProto(ev.GetExited()), nil
		case err == nil:
			// The plugin's Wait failed (wait_failed): the Wait call below
			// brings the error itself.
		case ctx.Err() != nil:
			return env.NoStatus, ctx.Err()
		default:
			p.mu.Lock()
			released := p.released
			p.mu.Unlock()
			if released {
				return env.NoStatus, fmt.Errorf("plugin %s: process %d: %w", p.e.found.Name, p.pid, env.ErrReleased)
			}
			return env.NoStatus, p.e.fail(c, p.op("wait"), err)
		}
	}
	resp, err := c.rpc.Wait(ctx, &pb.ProcessRequest{ProcessId: id})
	if err != nil {
		if ctx.Err() != nil {
			return env.NoStatus, ctx.Err()
		}
		return env.NoStatus, p.e.fail(c, p.op("wait"), err)
	}
	return wire.StatusFromProto(resp.GetStatus()), nil
}

func (p *process) Resize(ctx context.Context, size env.WindowSize) error {
	c, id, err := p.handle(ctx)
	if err != nil {
		return err
	}
	if _, err := c.rpc.Resize(ctx, &pb.ResizeRequest{ProcessId: id, Size: &pb.WindowSize{Rows: uint32(size.Rows), Cols: uint32(size.Cols)}}); err != nil {
		return p.e.fail(c, p.op("resize"), err)
	}
	return nil
}

// Ref returns the Ref the plugin reported at start; no call crosses the
// boundary, so it works even while the plugin is down.
func (p *process) Ref() (env.Ref, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released {
		return env.Ref{}, fmt.Errorf("plugin %s: process %d: %w", p.e.found.Name, p.pid, env.ErrReleased)
	}
	if p.ref == nil {
		return env.Ref{}, fmt.Errorf("plugin %s: process %d was not detached: %w", p.e.found.Name, p.pid, env.ErrUnsupported)
	}
	return *p.ref, nil
}

// Release drops the handle. The plugin frees its side asynchronously: the
// caller loses nothing by not waiting (the process keeps running either
// way). A process started on a Run stream is released by ending the
// stream; otherwise a Release call goes out, and Close waits for it. Close
// releases, in the plugin, whatever handle is still held there.
func (p *process) Release() error {
	p.mu.Lock()
	if p.released {
		p.mu.Unlock()
		return nil
	}
	p.released = true
	c, id, run := p.c, p.id, p.run
	p.mu.Unlock()
	if run != nil {
		run.cancel()
		return nil
	}
	if !c.alive() {
		return nil
	}
	p.e.pending.Add(1)
	go func() {
		defer p.e.pending.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.rpc.Release(ctx, &pb.ProcessRequest{ProcessId: id}); err != nil {
			if err := p.e.fail(c, p.op("release"), err); !errors.Is(err, env.ErrUnavailable) {
				p.e.log.Warn("release", "err", err)
			}
		}
	}()
	return nil
}

func (p *process) Remove(ctx context.Context) error {
	c, id, err := p.handle(ctx)
	if err != nil {
		return err
	}
	if _, err := c.rpc.Remove(ctx, &pb.ProcessRequest{ProcessId: id}); err != nil {
		return p.e.fail(c, p.op("remove"), err)
	}
	p.mu.Lock()
	p.released = true
	run := p.run
	p.mu.Unlock()
	if run != nil {
		run.cancel()
	}
	return nil
}

// outputReader reads an Output stream. It counts delivered bytes so that,
// when the plugin dies mid-stream and the process can be re-attached, it
// resumes from exactly the next byte: no gap, no repeat.
type outputReader struct {
	p      *process
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	off      int64
	stream   pb.Backend_OutputClient
	streamC  *conn
	pending  wire.Chunk // received, not yet read: the transport's buffers
	eof      bool
	closed   bool
	restarts int
}

// maxStreamRestarts bounds the re-opens of one stream after plugin crashes
// without any byte delivered in between.
const maxStreamRestarts = 3

func (r *outputReader) Read(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.pending.Len() == 0 {
		if r.closed {
			return 0, fmt.Errorf("plugin %s: %s: read after close: %w", r.p.e.found.Name, r.p.op("output"), env.ErrReleased)
		}
		if r.eof {
			return 0, io.EOF
		}
		if r.stream == nil {
			c, id, err := r.p.handle(r.ctx)
			if err != nil {
				return 0, err
			}
			s, err := c.rpc.Output(r.ctx, &pb.OutputRequest{ProcessId: id, Offset: r.off})
			if err != nil {
				return 0, r.p.e.fail(c, r.p.op("output"), err)
			}
			r.stream, r.streamC = s, c
		}
		// RecvMsg into a wire.Chunk (not Recv, which would copy the
		// data into a new OutputChunk): Read copies it out of the
		// transport's buffers into b.
		err := r.stream.RecvMsg(&r.pending)
		if err == io.EOF {
			r.eof = true
			return 0, io.EOF
		}
		if err != nil {
			c := r.streamC
			r.stream, r.streamC = nil, nil
			if r.ctx.Err() != nil {
				return 0, r.ctx.Err()
			}
			err = r.p.e.fail(c, r.p.op("output"), err)
			// A detached process survives its plugin: re-open on a new
			// plugin from the next undelivered byte.
			if errors.Is(err, env.ErrUnavailable) && r.p.ref != nil && r.restarts < maxStreamRestarts {
				r.restarts++
				continue
			}
			return 0, err
		}
		if r.pending.Len() > 0 {
			r.restarts = 0
		}
	}
	n, _ := r.pending.Read(b)
	r.off += int64(n)
	return n, nil
}

func (r *outputReader) Close() error {
	r.cancel()
	r.mu.Lock()
	r.closed = true
	r.pending.Close()
	r.mu.Unlock()
	return nil
}
