//go:build linux || darwin

package local

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPumpLateReaderKeepsOutput: a pump that first reads after the grace
// already expired (a starved goroutine on a loaded machine) still
// delivers what the process wrote, then ends although a descendant holds
// the write end open.
func TestPumpLateReaderKeepsOutput(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer w.Close()
	if _, err := w.WriteString("written before exit\n"); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	p := newOutPump(r, false)
	p.processExited()
	require.NoError(t, r.SetReadDeadline(time.Now().Add(-time.Second)))
	go p.run()
	s := p.open(context.Background(), 0)
	got, err := io.ReadAll(s)
	<-p.ended
	p.closeFile()
	require.Truef(t, err == nil && string(got) == "written before exit\n", "read %q, %v", got, err)
}

// TestPumpBackpressure: without a reader the pump holds at most
// maxPending bytes; a late reader still gets everything, in order.
func TestPumpBackpressure(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	p := newOutPump(r, false)
	go p.run()
	const total = 4 * maxPending
	go func() {
		buf := make([]byte, total)
		for i := range buf {
			buf[i] = byte(i % 251)
		}
		_, _ = w.Write(buf)
		_ = w.Close()
	}()
	// Wait until the pump stops reading: the buffer is full and the pipe
	// cannot take the rest.
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.w-p.r >= maxPending
	}, 30*time.Second, 5*time.Millisecond, "waiting for the pump to stop reading at its bound")
	p.mu.Lock()
	assert.Truef(t, p.w-p.r <= maxPending, "pump buffered %d bytes without a reader, bound is %d", p.w-p.r, maxPending)
	p.mu.Unlock()
	got, err := io.ReadAll(p.open(context.Background(), 0))
	<-p.ended
	p.closeFile()
	require.Truef(t, err == nil && len(got) == total, "read %d bytes, %v", len(got), err)
	for i, b := range got {
		require.Truef(t, b == byte(i%251), "byte %d = %d, want %d", i, b, i%251)
	}
}
