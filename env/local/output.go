package local

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"time"
)

const (
	// maxPending bounds the output buffered ahead of a slow (or absent)
	// reader; beyond it the pump stops reading and the process blocks on
	// write, exactly as it would on a full pipe.
	maxPending = 256 << 10
	// maxAfterExit bounds what descendants may add during OutputGrace.
	maxAfterExit = 8 << 20
)

// outPump copies a process's output (pipe read end or PTY master) into a
// bounded buffer for the one live stream.
type outPump struct {
	f   *os.File
	pty bool

	mu        sync.Mutex
	cond      *sync.Cond
	buf       []byte
	err       error // terminal: io.EOF or a read error
	exited    bool
	discarded bool // the reader closed, or the handle was released

	ended chan struct{} // closed when run returns
}

func newOutPump(f *os.File, pty bool) *outPump {
	p := &outPump{f: f, pty: pty, ended: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *outPump) run() {
	defer close(p.ended)
	chunk := make([]byte, 32<<10)
	var afterExit int
	for {
		p.mu.Lock()
		for len(p.buf) >= maxPending && !p.exited && !p.discarded {
			p.cond.Wait()
		}
		exited := p.exited
		p.mu.Unlock()

		n, err := p.f.Read(chunk)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The grace is over, but what is already buffered in the pipe
			// or terminal is still the process's output: a reader
			// scheduled late must not lose it (Go checks the deadline
			// before it even tries to read).
			n, err = readNow(p.f, chunk)
			if n <= 0 || afterExit+n > maxAfterExit {
				n, err = max(n, 0), io.EOF
			}
		}
		p.mu.Lock()
		if n > 0 && !p.discarded {
			p.buf = append(p.buf, chunk[:n]...)
		}
		if exited {
			afterExit += n
		}
		switch {
		case err == nil && afterExit > maxAfterExit:
			err = io.EOF
		case err == nil:
		case errors.Is(err, io.EOF), errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, os.ErrClosed):
			err = io.EOF
		case p.pty && errors.Is(err, syscall.EIO):
			// The terminal's last holder closed it: that is EOF for a pty.
			err = io.EOF
		}
		if err != nil {
			p.err = err
			p.cond.Broadcast()
			p.mu.Unlock()
			return
		}
		p.cond.Broadcast()
		p.mu.Unlock()
	}
}

// processExited starts the grace after which the stream ends even if a
// descendant still holds the output open.
func (p *outPump) processExited() {
	p.mu.Lock()
	p.exited = true
	p.cond.Broadcast()
	p.mu.Unlock()
	_ = p.f.SetReadDeadline(time.Now().Add(OutputGrace))
}

func (p *outPump) discard() {
	p.mu.Lock()
	p.discarded = true
	p.buf = nil
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *outPump) closeFile() { _ = p.f.Close() }

func (p *outPump) open(ctx context.Context, skip int64) io.ReadCloser {
	s := &liveStream{p: p, ctx: ctx, skip: skip}
	s.stop = context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	return s
}

// liveStream is the one reader of an outPump.
type liveStream struct {
	p      *outPump
	ctx    context.Context
	stop   func() bool
	skip   int64
	closed bool
}

func (s *liveStream) Read(b []byte) (int, error) {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if s.closed {
			return 0, os.ErrClosed
		}
		if err := s.ctx.Err(); err != nil {
			return 0, err
		}
		if s.skip > 0 && len(p.buf) > 0 {
			n := int(min(s.skip, int64(len(p.buf))))
			p.consume(n)
			s.skip -= int64(n)
			continue
		}
		if len(p.buf) > 0 {
			if len(b) == 0 {
				return 0, nil
			}
			n := copy(b, p.buf)
			p.consume(n)
			return n, nil
		}
		if p.err != nil {
			return 0, p.err
		}
		p.cond.Wait()
	}
}

// consume drops n bytes from the head of the buffer; the caller holds mu.
func (p *outPump) consume(n int) {
	p.buf = p.buf[n:]
	if len(p.buf) == 0 {
		p.buf = nil // let the backing array go
	}
	p.cond.Broadcast()
}

// Close ends this stream; the process is unaffected and its further
// output is discarded.
func (s *liveStream) Close() error {
	s.stop()
	s.p.mu.Lock()
	s.closed = true
	s.p.mu.Unlock()
	s.p.discard()
	return nil
}
