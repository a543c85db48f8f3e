// Package syncbuf is a bytes.Buffer that tests read while a process, a
// stream or a logger writes it from another goroutine.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer collects what is written to it; String may be called at any
// time. The zero value is ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
