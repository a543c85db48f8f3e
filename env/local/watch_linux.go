package local

import (
	"context"
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// dirWatch wakes a waiter when anything in a process directory changes
// (the log grows, the exit file appears), so following output and Wait
// react at once instead of on the next poll. Where inotify is unavailable
// it degrades to adaptive polling. Either way a wait is bounded by a
// timeout, so conditions no file event announces (a shim that died) are
// still noticed.
type dirWatch struct {
	f *os.File // inotify descriptor, registered with Go's poller; nil: poll
	b backoff
}

func newDirWatch(dir string) *dirWatch {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return &dirWatch{}
	}
	const mask = unix.IN_MODIFY | unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_CLOSE_WRITE | unix.IN_DELETE_SELF
	if _, err := unix.InotifyAddWatch(fd, dir, mask); err != nil {
		_ = unix.Close(fd)
		return &dirWatch{}
	}
	return &dirWatch{f: os.NewFile(uintptr(fd), "inotify:"+dir)}
}

// maxWatchWait bounds one wait when inotify is in use.
const maxWatchWait = 500 * time.Millisecond

// wait blocks until a change, the timeout, ctx's end or Close. It returns
// ctx's error, os.ErrClosed after Close, and nil otherwise.
func (w *dirWatch) wait(ctx context.Context, stop <-chan struct{}) error {
	if w.f == nil {
		return sleepCtx(ctx, w.b.next(), stop)
	}
	_ = w.f.SetReadDeadline(time.Now().Add(maxWatchWait))
	cancel := context.AfterFunc(ctx, func() { _ = w.f.SetReadDeadline(time.Now()) })
	defer cancel()
	var buf [4096]byte
	_, err := w.f.Read(buf[:])
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	select {
	case <-stop:
		return os.ErrClosed
	default:
	}
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		if errors.Is(err, os.ErrClosed) {
			return os.ErrClosed
		}
		// The watch broke (the directory was removed): fall back to polling.
		w.f = nil
	}
	return nil
}

// activity tells the fallback poller that something happened, so it polls
// fast again.
func (w *dirWatch) activity() { w.b.reset() }

func (w *dirWatch) Close() error {
	if w.f != nil {
		return w.f.Close()
	}
	return nil
}
