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
	// maxPending bounds the output the pump buffers while no stream reads
	// the descriptor; beyond it the pump stops reading and the process
	// blocks on write, exactly as it would on a full pipe.
	maxPending = 256 << 10
	// maxAfterExit bounds what descendants may add during OutputGrace.
	maxAfterExit = 8 << 20
)

// outPump owns a process's output descriptor (pipe read end or PTY
// master) for the one live stream.
//
// While a stream is open it reads the descriptor itself, straight into
// the caller's buffer: no extra copy and no goroutine hand-off per chunk,
// which is what lets a flood of output through at close to pipe speed.
// While no stream reads — before Output is called, and after the stream is
// closed or the handle released — a pump goroutine reads instead, keeping
// up to maxPending bytes for a stream still to come (or discarding them),
// so that Wait never depends on a reader showing up.
//
// Exactly one goroutine reads the descriptor at a time (reader). Handing
// it over interrupts a blocked read with a read deadline in the past;
// every deadline change happens under mu, and the goroutine whose read
// was interrupted restores the deadline in force.
type outPump struct {
	f   *os.File
	pty bool

	mu   sync.Mutex
	cond *sync.Cond
	// buf[r:w] holds output read by the pump and not yet by the stream.
	// The pump reads into buf[w:] without holding mu: only it moves w.
	buf  []byte
	r, w int

	err       error // terminal, io.EOF in practice; set once, then ended is closed
	exited    bool
	afterExit int       // bytes read since the process exited
	deadline  time.Time // the read deadline in force (zero: none)

	reader    readerKind // who is inside f.Read
	interrupt bool       // the current read was cut short on purpose
	pumping   bool       // the pump goroutine runs
	streamOn  bool       // a live stream owns the descriptor
	discarded bool       // output is dropped: the stream closed or the handle was released

	ended chan struct{} // closed once err is set
}

type readerKind int

const (
	readerNone readerKind = iota
	readerPump
	readerStream
)

// newOutPump returns a pump for f; the caller starts it with go p.run().
func newOutPump(f *os.File, pty bool) *outPump {
	p := &outPump{f: f, pty: pty, pumping: true, ended: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// run is the pump goroutine: it reads while no stream does.
func (p *outPump) run() {
	scratch := make([]byte, 4<<10) // for discarded output and growth after exit
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		for p.w-p.r >= maxPending && !p.exited && !p.discarded && !p.streamOn && p.err == nil {
			p.cond.Wait()
		}
		if p.streamOn || p.err != nil {
			p.pumping = false
			p.cond.Broadcast()
			return
		}
		chunk, direct := scratch, false
		if !p.discarded {
			p.makeRoomLocked()
			if p.w < len(p.buf) {
				chunk, direct = p.buf[p.w:], true
			}
		}
		n, err := p.readLocked(chunk, readerPump)
		if n > 0 && !p.discarded {
			if direct {
				p.w += n
			} else {
				p.appendLocked(chunk[:n])
			}
		}
		if err != nil {
			p.endLocked(err)
		}
		p.cond.Broadcast()
	}
}

// readLocked reads once from f into b as who, releasing mu during the
// read. It applies the exit grace: once the deadline set by processExited
// has passed, what the descriptor still holds is taken without waiting,
// and an empty read or too much output from descendants ends the stream.
// An interrupted read returns what it got and no error. The caller holds
// mu.
func (p *outPump) readLocked(b []byte, who readerKind) (int, error) {
	p.reader = who
	p.mu.Unlock()
	n, err := p.f.Read(b)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// Go checks the deadline before it even tries to read: what is
		// already in the pipe or terminal is still the process's output,
		// and a reader scheduled late must not lose it.
		n, err = readNow(p.f, b)
		if err == nil && n == 0 {
			err = os.ErrDeadlineExceeded
		}
	}
	p.mu.Lock()
	p.reader = readerNone
	if p.interrupt {
		p.interrupt = false
		_ = p.f.SetReadDeadline(p.deadline)
		if errors.Is(err, os.ErrDeadlineExceeded) && (p.deadline.IsZero() || time.Now().Before(p.deadline)) {
			err = nil
		}
	}
	if p.exited {
		p.afterExit += n
		if err == nil && p.afterExit > maxAfterExit {
			err = io.EOF
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, io.EOF), errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, os.ErrClosed):
		err = io.EOF
	case p.pty && errors.Is(err, syscall.EIO):
		// The terminal's last holder closed it: that is EOF for a pty.
		err = io.EOF
	}
	return max(n, 0), err
}

// interruptLocked cuts a blocked read short so another goroutine can take
// the descriptor; the caller holds mu.
func (p *outPump) interruptLocked() {
	if p.reader != readerNone && !p.interrupt {
		p.interrupt = true
		_ = p.f.SetReadDeadline(time.Unix(1, 0))
	}
}

func (p *outPump) endLocked(err error) {
	if p.err == nil {
		p.err = err
		close(p.ended)
	}
}

// makeRoomLocked resets, grows or compacts buf so that the pump can read
// into buf[w:]. The buffer starts empty and grows while output outpaces
// the stream, so thousands of quiet processes stay cheap; the caller holds
// mu.
func (p *outPump) makeRoomLocked() {
	if p.r == p.w {
		p.r, p.w = 0, 0
	}
	unread := p.w - p.r
	switch {
	case len(p.buf) < maxPending && (len(p.buf) == 0 || 2*unread > len(p.buf)):
		grown := make([]byte, min(max(2*len(p.buf), 4<<10), maxPending))
		p.w = copy(grown, p.buf[p.r:p.w])
		p.r = 0
		p.buf = grown
	case p.r > 0 && 4*(len(p.buf)-p.w) < len(p.buf):
		p.w = copy(p.buf, p.buf[p.r:p.w])
		p.r = 0
	}
}

// appendLocked stores b, read into scratch space once the buffer was full
// after exit, growing buf up to maxAfterExit beyond maxPending; the caller
// holds mu.
func (p *outPump) appendLocked(b []byte) {
	p.makeRoomLocked()
	if len(p.buf)-p.w < len(b) && len(p.buf) < maxPending+maxAfterExit {
		grown := make([]byte, min(max(2*len(p.buf), p.w-p.r+len(b)), maxPending+maxAfterExit))
		p.w = copy(grown, p.buf[p.r:p.w])
		p.r = 0
		p.buf = grown
	}
	p.w += copy(p.buf[p.w:], b)
}

// processExited starts the grace after which the stream ends even if a
// descendant still holds the output open.
func (p *outPump) processExited() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.exited = true
	p.deadline = time.Now().Add(OutputGrace)
	if !p.interrupt {
		// An interrupted reader restores p.deadline itself.
		_ = p.f.SetReadDeadline(p.deadline)
	}
	p.cond.Broadcast()
}

// discard drops buffered and further output: the handle was released.
func (p *outPump) discard() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.discardLocked()
}

// discardLocked makes sure someone drains the descriptor to its end so the
// process never blocks on a full pipe; the caller holds mu.
func (p *outPump) discardLocked() {
	p.discarded = true
	p.r = p.w // the pump may be reading into buf[w:]: leave the indices to it
	if p.streamOn {
		p.streamOn = false
		p.interruptLocked()
	}
	p.startPumpLocked()
	p.cond.Broadcast()
}

// startPumpLocked restarts the pump once the descriptor is free; the
// caller holds mu.
func (p *outPump) startPumpLocked() {
	if !p.pumping && p.err == nil && p.reader != readerStream {
		p.pumping = true
		go p.run()
	}
}

func (p *outPump) closeFile() { _ = p.f.Close() }

func (p *outPump) open(ctx context.Context, skip int64) io.ReadCloser {
	p.mu.Lock()
	if !p.discarded {
		p.streamOn = true
		if p.reader == readerPump {
			p.interruptLocked()
		}
		p.cond.Broadcast()
	}
	p.mu.Unlock()
	s := &liveStream{p: p, ctx: ctx, skip: skip}
	s.stop = context.AfterFunc(ctx, func() {
		p.mu.Lock()
		if p.reader == readerStream {
			p.interruptLocked()
		}
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	return s
}

// liveStream is the one reader of an outPump. Like any io.Reader it is not
// for concurrent Reads; Close may be called concurrently with a Read.
type liveStream struct {
	p       *outPump
	ctx     context.Context
	stop    func() bool
	skip    int64
	scratch []byte
}

func (s *liveStream) Read(b []byte) (int, error) {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if !p.streamOn {
			return 0, os.ErrClosed
		}
		if err := s.ctx.Err(); err != nil {
			return 0, err
		}
		if s.skip > 0 && p.w > p.r {
			n := int(min(s.skip, int64(p.w-p.r)))
			p.consumeLocked(n)
			s.skip -= int64(n)
			continue
		}
		if p.w > p.r {
			if len(b) == 0 {
				return 0, nil
			}
			n := copy(b, p.buf[p.r:p.w])
			p.consumeLocked(n)
			return n, nil
		}
		if p.err != nil {
			return 0, p.err
		}
		if p.pumping {
			p.cond.Wait() // the pump is handing the descriptor over
			continue
		}
		if len(b) == 0 {
			return 0, nil
		}
		dst := b
		if s.skip > 0 {
			if s.scratch == nil {
				s.scratch = make([]byte, 32<<10)
			}
			dst = s.scratch[:min(int64(len(s.scratch)), s.skip)]
		}
		n, err := p.readLocked(dst, readerStream)
		if err != nil {
			p.endLocked(err)
		}
		p.cond.Broadcast()
		if !p.streamOn {
			// Closed or released while reading: someone must drain.
			p.startPumpLocked()
			return 0, os.ErrClosed
		}
		if s.skip > 0 {
			s.skip -= int64(n)
			continue
		}
		if n > 0 {
			return n, nil
		}
		if err != nil {
			return 0, err
		}
	}
}

// consumeLocked drops n bytes from the head of the unread output; the
// caller holds mu. Only the pump resets the indices (makeRoomLocked): it
// may be reading into buf[w:] right now.
func (p *outPump) consumeLocked(n int) {
	p.r += n
	p.cond.Broadcast()
}

// Close ends this stream; the process is unaffected and its further
// output is discarded.
func (s *liveStream) Close() error {
	s.stop()
	s.p.discard()
	return nil
}
