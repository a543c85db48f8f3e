package local

import (
	"errors"
	"io"
	"os"
	"time"

	"github.com/corralhq/corral/env"
	"golang.org/x/sys/unix"
)

// copyTerminal copies the terminal's output into the log until no one
// holds the terminal any more, and records the exit once the leader ended
// and what it wrote is in the log.
func (p *serverProc) copyTerminal() {
	defer p.s.work.Done()
	buf := make([]byte, 128<<10)
	recorded := false
	for {
		n, err := p.master.Read(buf)
		if n > 0 {
			if _, werr := p.logFile.Write(buf[:n]); werr != nil {
				p.diag("write log: %v", werr)
			}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && !recorded {
			// The leader ended. Reading a pty master with nothing buffered
			// first flushes the kernel's pending input, so reading until
			// EAGAIN gets everything the leader wrote.
			_ = p.master.SetReadDeadline(time.Time{})
			p.drainTerminal(buf)
			p.recordExit(<-p.exitWS)
			recorded = true
			continue
		}
		if err != nil {
			// EIO: every holder of the terminal closed it; that is EOF.
			break
		}
	}
	if !recorded {
		p.recordExit(<-p.exitWS)
	}
	p.s.mu.Lock()
	delete(p.s.ptys, p.id)
	p.s.mu.Unlock()
	p.ptyMu.Lock()
	_ = p.master.Close()
	p.master = nil
	p.ptyMu.Unlock()
	if p.stdinR != nil {
		// Ends forwardStdin.
		_ = p.stdinR.Close()
	}
	_ = p.logFile.Close()
}

func (p *serverProc) drainTerminal(buf []byte) {
	rc, err := p.master.SyscallConn()
	if err != nil {
		return
	}
	for {
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, rerr = unix.Read(int(fd), buf)
			return true
		}); err != nil {
			return
		}
		if n <= 0 || rerr != nil {
			return
		}
		if _, err := p.logFile.Write(buf[:n]); err != nil {
			p.diag("write log: %v", err)
		}
	}
}

// forwardStdin copies what supervisors write into the stdin FIFO into the
// terminal. Once every writer let go (CloseStdin), it types the terminal's
// EOF character: a terminal has no half-close.
func (p *serverProc) forwardStdin() {
	defer p.s.work.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := p.stdinR.Read(buf)
		if n > 0 {
			if !p.toTerminal(buf[:n]) {
				return
			}
		}
		if errors.Is(err, io.EOF) {
			p.toTerminal([]byte{4})
			return
		}
		if err != nil {
			return
		}
	}
}

func (p *serverProc) toTerminal(b []byte) bool {
	p.ptyMu.Lock()
	m := p.master
	p.ptyMu.Unlock()
	if m == nil {
		return false
	}
	_, err := m.Write(b)
	return err == nil
}

// resize sets the window size of a process's terminal. gone reports that
// the server holds no terminal of that id (the process ended, or another
// server runs it).
func (s *shimServer) resize(id string, size *env.WindowSize) (gone bool, errMsg string) {
	if size == nil {
		return false, "resize: no size"
	}
	s.mu.Lock()
	p := s.ptys[id]
	s.mu.Unlock()
	if p == nil {
		return true, ""
	}
	p.ptyMu.Lock()
	defer p.ptyMu.Unlock()
	if p.master == nil {
		return true, ""
	}
	if err := resizePTY(p.master, *size); err != nil {
		return false, err.Error()
	}
	return false, ""
}
