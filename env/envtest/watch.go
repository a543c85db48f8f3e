package envtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/env"
)

// Watcher reads one output stream of a process in the background so a test
// can wait for events in it ("ready", a number of bytes, the end) without
// sleeping.
type Watcher struct {
	rc io.ReadCloser

	mu      sync.Mutex
	buf     []byte
	ended   bool
	err     error         // why the stream ended; nil for io.EOF
	changed chan struct{} // closed (and replaced) whenever buf or ended changes

	done chan struct{} // closed when the reading goroutine returns
}

// Watch opens p's output at offset and starts reading it. Close the
// Watcher when done; it does not affect the process.
func Watch(ctx context.Context, p env.Process, offset int64) (*Watcher, error) {
	rc, err := p.Output(ctx, offset)
	if err != nil {
		return nil, fmt.Errorf("Output(%d): %w", offset, err)
	}
	w := &Watcher{rc: rc, changed: make(chan struct{}), done: make(chan struct{})}
	go w.loop()
	return w, nil
}

func (w *Watcher) loop() {
	defer close(w.done)
	chunk := make([]byte, 64<<10)
	for {
		n, err := w.rc.Read(chunk)
		w.mu.Lock()
		w.buf = append(w.buf, chunk[:n]...)
		if err != nil {
			w.ended = true
			if !errors.Is(err, io.EOF) {
				w.err = err
			}
		}
		close(w.changed)
		w.changed = make(chan struct{})
		w.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// Bytes returns a copy of everything read so far.
func (w *Watcher) Bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Clone(w.buf)
}

// waitUntil blocks until cond holds for the bytes read so far and the
// stream state, or ctx ends.
func (w *Watcher) waitUntil(ctx context.Context, what string, cond func(b []byte, ended bool) bool) ([]byte, error) {
	for {
		w.mu.Lock()
		b, ended, err, ch := w.buf, w.ended, w.err, w.changed
		ok := cond(b, ended)
		b = bytes.Clone(b)
		w.mu.Unlock()
		if ok {
			return b, nil
		}
		if ended {
			if err != nil {
				return b, fmt.Errorf("waiting for %s: stream failed: %w", what, err)
			}
			return b, fmt.Errorf("waiting for %s: stream ended (EOF) first", what)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return b, fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
	}
}

// WaitFor blocks until the output read so far contains sub and returns it.
func (w *Watcher) WaitFor(ctx context.Context, sub string) ([]byte, error) {
	return w.waitUntil(ctx, fmt.Sprintf("%q in the output", sub), func(b []byte, _ bool) bool {
		return bytes.Contains(b, []byte(sub))
	})
}

// WaitLen blocks until at least n bytes were read.
func (w *Watcher) WaitLen(ctx context.Context, n int) ([]byte, error) {
	return w.waitUntil(ctx, fmt.Sprintf("%d bytes of output", n), func(b []byte, _ bool) bool {
		return len(b) >= n
	})
}

// WaitEOF blocks until the stream ends with io.EOF and returns all bytes.
func (w *Watcher) WaitEOF(ctx context.Context) ([]byte, error) {
	b, err := w.waitUntil(ctx, "the end of the output", func(_ []byte, ended bool) bool { return ended })
	if err != nil {
		return b, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return b, fmt.Errorf("output stream failed: %w", w.err)
	}
	return b, nil
}

// Close closes the stream and waits (a bounded time) for the reading
// goroutine: a backend whose Read does not return after Close is reported
// as an error rather than hanging the test.
func (w *Watcher) Close() error {
	err := w.rc.Close()
	select {
	case <-w.done:
	case <-time.After(closeBound):
		return fmt.Errorf("%w %v after Close", errReadBlocked, closeBound)
	}
	return err
}

var errReadBlocked = errors.New("output stream: Read still blocked")

// closeBound is how long a blocked Read may take to return after Close.
const closeBound = 30 * time.Second

// watch opens a Watcher that is closed when the test ends.
func (s *suite) watch(t *testing.T, p env.Process, offset int64) *Watcher {
	t.Helper()
	w, err := Watch(s.ctx(t), p, offset)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil && errors.Is(err, errReadBlocked) {
			t.Error(err)
		}
	})
	return w
}

func (s *suite) waitFor(t *testing.T, w *Watcher, sub string) []byte {
	t.Helper()
	b, err := w.WaitFor(s.ctx(t), sub)
	if err != nil {
		t.Fatalf("%v; output so far: %q", err, clip(b))
	}
	return b
}

func (s *suite) waitEOF(t *testing.T, w *Watcher) []byte {
	t.Helper()
	b, err := w.WaitEOF(s.ctx(t))
	if err != nil {
		t.Fatalf("%v; output so far: %q", err, clip(b))
	}
	return b
}
