package local

import (
	"context"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/corralhq/corral/internal/backoff"
	"golang.org/x/sys/unix"
)

// dirHub is an Env's one inotify instance, shared by every follower of a
// detached process's directory (output streams, Wait). One instance for
// the Env's life, not one per wait: closing an inotify instance waits for
// an SRCU grace period in the kernel (milliseconds), which a per-wait
// instance would add to every Wait and every stream's end. The reader
// goroutine starts with the first watch and ends with Close.
type dirHub struct {
	mu      sync.Mutex
	f       *os.File // nil until the first watch, or when unavailable
	failed  bool     // inotify unavailable: everyone polls
	closed  bool
	byWD    map[int32]*hubWatch
	byDir   map[string]*hubWatch
	readerW sync.WaitGroup
	done    chan struct{} // closed by Close
}

// hubWatch is one watched directory and its waiters.
type hubWatch struct {
	dir     string
	wd      int32
	refs    int
	waiters map[chan struct{}]struct{}
	gone    bool // the kernel dropped the watch (directory removed)
}

const hubMask = unix.IN_MODIFY | unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_CLOSE_WRITE | unix.IN_DELETE_SELF

// watch subscribes to changes in dir. It returns nil when inotify cannot
// watch it; the caller then polls.
func (h *dirHub) watch(dir string) (*hubWatch, chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.failed {
		return nil, nil
	}
	if h.f == nil {
		fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
		if err != nil {
			h.failed = true
			return nil, nil
		}
		h.f = os.NewFile(uintptr(fd), "inotify")
		h.byWD = make(map[int32]*hubWatch)
		h.byDir = make(map[string]*hubWatch)
		if h.done == nil {
			h.done = make(chan struct{})
		}
		h.readerW.Add(1)
		go h.read(h.f)
	}
	hw := h.byDir[dir]
	if hw == nil {
		wd, err := unix.InotifyAddWatch(int(h.f.Fd()), dir, hubMask)
		if err != nil {
			return nil, nil
		}
		if old := h.byWD[int32(wd)]; old != nil {
			// The same directory under another name: share it.
			hw = old
		} else {
			hw = &hubWatch{dir: dir, wd: int32(wd), waiters: make(map[chan struct{}]struct{})}
			h.byWD[hw.wd] = hw
		}
		h.byDir[dir] = hw
	}
	hw.refs++
	ch := make(chan struct{}, 1)
	hw.waiters[ch] = struct{}{}
	return hw, ch
}

func (h *dirHub) unwatch(hw *hubWatch, ch chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(hw.waiters, ch)
	hw.refs--
	if hw.refs > 0 || hw.gone {
		return
	}
	hw.gone = true
	delete(h.byWD, hw.wd)
	if h.byDir[hw.dir] == hw {
		delete(h.byDir, hw.dir)
	}
	if h.f != nil && !h.closed {
		_, _ = unix.InotifyRmWatch(int(h.f.Fd()), uint32(hw.wd))
	}
}

// While events arrive back to back (a command flooding its log), the hub
// pauses between batches and lets the kernel merge them: woken on every
// write, the reader spent more than the writer and halved a flood's
// throughput (the figures are in BenchmarkDetachedIngest). A first event
// after a quiet spell is delivered at once; during a flood delivery lags
// by at most hubBusyPause.
const (
	hubBusyGap   = time.Millisecond
	hubBusyPause = 2 * time.Millisecond
)

// read dispatches events to the waiters of their directory until Close.
func (h *dirHub) read(f *os.File) {
	defer h.readerW.Done()
	buf := make([]byte, 64<<10)
	var last time.Time
	for {
		n, err := f.Read(buf)
		if err != nil {
			return
		}
		h.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				for _, hw := range h.byWD {
					hw.notify()
				}
				continue
			}
			hw := h.byWD[ev.Wd]
			if hw == nil {
				continue
			}
			if ev.Mask&(unix.IN_IGNORED|unix.IN_DELETE_SELF) != 0 {
				// The directory is gone (or unmounted): no more events
				// will come; waiters fall back to polling.
				hw.gone = true
				delete(h.byWD, hw.wd)
				if h.byDir[hw.dir] == hw {
					delete(h.byDir, hw.dir)
				}
			}
			hw.notify()
		}
		h.mu.Unlock()
		if time.Since(last) < hubBusyGap {
			// h.done is set before the reader starts and closed by close.
			select {
			case <-time.After(hubBusyPause):
			case <-h.done:
			}
		}
		last = time.Now()
	}
}

func (hw *hubWatch) notify() {
	for ch := range hw.waiters {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// close stops the reader and wakes every waiter, which then polls.
func (h *dirHub) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	if h.done == nil {
		h.done = make(chan struct{})
	}
	close(h.done)
	f := h.f
	h.mu.Unlock()
	if f != nil {
		_ = f.Close()
	}
	h.readerW.Wait()
}

func (h *dirHub) closedCh() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done == nil {
		h.done = make(chan struct{})
	}
	return h.done
}

// dirWatch wakes a waiter when anything in a process directory changes
// (the log grows, the exit file appears), so following output and Wait
// react at once instead of on the next poll. Where inotify is unavailable
// it degrades to adaptive polling. Either way a wait is bounded by a
// timeout, so conditions no file event announces (a shim server that
// died) are still noticed.
type dirWatch struct {
	h       *dirHub
	hw      *hubWatch // nil: poll
	ch      chan struct{}
	closed  <-chan struct{}
	polling bool // the hub closed: poll from now on
	b       backoff.Backoff
	once    sync.Once
}

func (e *Env) newDirWatch(dir string) *dirWatch {
	hw, ch := e.hub.watch(dir)
	return &dirWatch{h: &e.hub, hw: hw, ch: ch, closed: e.hub.closedCh(), b: newPollBackoff()}
}

// newPollBackoff paces a watch without inotify: 2ms right after activity,
// doubling while idle up to 256ms, so a busy directory is seen within
// milliseconds and an idle one costs a few reads a second.
func newPollBackoff() backoff.Backoff {
	return backoff.Backoff{Min: 2 * time.Millisecond, Max: 256 * time.Millisecond, Factor: 2}
}

// maxWatchWait bounds one wait when inotify is in use.
const maxWatchWait = 500 * time.Millisecond

// wait blocks until a change, the timeout, ctx's end or stop. It returns
// ctx's error, os.ErrClosed after stop, and nil otherwise; changed is true
// when a file event (not a timeout or a poll) ended the wait, so the
// caller can skip checks that no file event announces.
func (w *dirWatch) wait(ctx context.Context, stop <-chan struct{}) (changed bool, err error) {
	if w.hw == nil || w.polling || w.isGone() {
		return false, backoff.Sleep(ctx, w.b.Next(), stop)
	}
	t := time.NewTimer(maxWatchWait)
	defer t.Stop()
	select {
	case <-w.ch:
		return true, nil
	case <-t.C:
		return false, nil
	case <-w.closed:
		// The Env closed its watcher: poll from now on.
		w.polling = true
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	case <-stop:
		return false, os.ErrClosed
	}
}

func (w *dirWatch) isGone() bool {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	return w.hw.gone
}

// activity tells the fallback poller that something happened, so it polls
// fast again.
func (w *dirWatch) activity() { w.b.Reset() }

func (w *dirWatch) Close() error {
	w.once.Do(func() {
		if w.hw != nil {
			w.h.unwatch(w.hw, w.ch)
		}
	})
	return nil
}
