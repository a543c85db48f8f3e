package local

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// stdinWatcher notices stdin.closed markers in process directories with
// one inotify instance for the whole server.
type stdinWatcher struct {
	s   *shimServer
	f   *os.File // nil: inotify unavailable, markers are polled
	mu  sync.Mutex
	wds map[int]*serverProc
	// polled are processes watched by polling where inotify failed.
	polled map[*serverProc]struct{}
	done   chan struct{}
	wg     sync.WaitGroup
}

func newStdinWatcher(s *shimServer) *stdinWatcher {
	w := &stdinWatcher{s: s, wds: make(map[int]*serverProc), polled: make(map[*serverProc]struct{}), done: make(chan struct{})}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err == nil {
		w.f = os.NewFile(uintptr(fd), "inotify")
		w.wg.Add(1)
		go w.run()
	}
	w.wg.Add(1)
	go w.poll()
	return w
}

func (w *stdinWatcher) watch(p *serverProc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p.over {
		return
	}
	if w.f != nil {
		if wd, err := unix.InotifyAddWatch(int(w.f.Fd()), p.dir, unix.IN_CREATE|unix.IN_MOVED_TO); err == nil {
			p.stdinWD = wd
			w.wds[wd] = p
			// A marker made before the watch existed.
			if fileExists(filepath.Join(p.dir, fileStdinClosed)) {
				go p.closeStdin()
			}
			return
		}
	}
	w.polled[p] = struct{}{}
}

func (w *stdinWatcher) unwatch(p *serverProc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p.over = true
	delete(w.polled, p)
	if p.stdinWD >= 0 {
		delete(w.wds, p.stdinWD)
		if w.f != nil {
			_, _ = unix.InotifyRmWatch(int(w.f.Fd()), uint32(p.stdinWD))
		}
		p.stdinWD = -1
	}
}

func (w *stdinWatcher) run() {
	defer w.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameEnd := off + unix.SizeofInotifyEvent + int(ev.Len)
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:min(nameEnd, n)]), "\x00")
			off = nameEnd
			if name != fileStdinClosed {
				continue
			}
			w.mu.Lock()
			p := w.wds[int(ev.Wd)]
			w.mu.Unlock()
			if p != nil {
				p.closeStdin()
			}
		}
	}
}

// poll is the fallback where inotify is unavailable or a watch could not
// be added: it looks for markers every 200 ms while there are such
// processes.
func (w *stdinWatcher) poll() {
	defer w.wg.Done()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
		}
		w.mu.Lock()
		var closed []*serverProc
		for p := range w.polled {
			if fileExists(filepath.Join(p.dir, fileStdinClosed)) || !dirExists(p.dir) {
				closed = append(closed, p)
				delete(w.polled, p)
			}
		}
		w.mu.Unlock()
		for _, p := range closed {
			p.closeStdin()
		}
	}
}

func (w *stdinWatcher) close() {
	close(w.done)
	if w.f != nil {
		_ = w.f.Close()
	}
	w.wg.Wait()
}

func dirExists(dir string) bool {
	_, err := os.Stat(dir)
	return err == nil
}
