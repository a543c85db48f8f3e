package local

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

// diskBytes is what path takes on disk (its allocated blocks).
func diskBytes(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(path, &st))
	return st.Blocks * 512
}

// TestDetachedLogBounded: a detached process that writes far more than
// Options.LogMax leaves a log that takes at most about LogMax on disk, a
// head and a tail, with its size and offsets unchanged and the dropped
// range recorded; the stream that followed it read every byte (nothing
// it had not read was dropped).
func TestDetachedLogBounded(t *testing.T) {
	const max = 4 << 20
	e, err := New(Options{StateDir: t.TempDir(), LogMax: max})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	head, tail := env.LogKeep(max)
	const total = 48 << 20
	p := start(t, e, env.Spec{Command: `yes "$(printf '%063d' 0 | tr 0 x)" | head -c ` + strconv.Itoa(total), Detach: true})
	r, err := p.Output(testCtx(t), 0)
	require.NoError(t, err)
	var n int64
	buf := make([]byte, 64<<10)
	for {
		k, err := r.Read(buf)
		if i := bytes.IndexByte(buf[:k], 0); i >= 0 {
			require.FailNow(t, fmt.Sprintf("the stream read a NUL at offset %d: it was dropped before it was read", n+int64(i)))
		}
		n += int64(k)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
	}
	r.Close()
	assert.EqualValues(t, total, n)
	assert.True(t, wait(t, p).Success())

	dir := p.(*detached).dir
	log := filepath.Join(dir, fileLog)
	fi, err := os.Stat(log)
	require.NoError(t, err)
	assert.EqualValues(t, total, fi.Size(), "the log's size (and offsets) changed")
	used := diskBytes(t, log)
	assert.LessOrEqual(t, used, int64(max+punchStep+2*punchAlign), "the log takes %d bytes on disk", used)
	rec, err := os.ReadFile(filepath.Join(dir, fileOmitted))
	require.NoError(t, err)
	f := strings.Fields(string(rec))
	require.Len(t, f, 2, "%q", rec)
	from, _ := strconv.ParseInt(f[0], 10, 64)
	to, _ := strconv.ParseInt(f[1], 10, 64)
	assert.Equal(t, alignUp(head, punchAlign), from)
	assert.GreaterOrEqual(t, to, int64(total)-tail-punchStep-punchAlign)

	// A reader by offset still works: the head and the tail are there,
	// the recorded range reads as zeros.
	all := readAll(t, p, 0)
	require.Equal(t, total, len(all))
	assert.False(t, strings.Contains(all[:from], "\x00"), "the head holds a NUL")
	assert.False(t, strings.Contains(all[to:], "\x00"), "the tail holds a NUL")
	assert.True(t, strings.Count(all[from:to], "\x00") == int(to-from), "the recorded range does not read as zeros")
	// That reader, too, dropped what it read but the tail: the record
	// says so, and the log from the range's end is still the tail.
	rec, err = os.ReadFile(filepath.Join(dir, fileOmitted))
	require.NoError(t, err)
	_, err = fmt.Sscanf(string(rec), "%d %d", &from, &to)
	require.NoError(t, err)
	assert.LessOrEqual(t, diskBytes(t, log), int64(max+punchStep+2*punchAlign))
	assert.True(t, readAll(t, p, to) == all[to:], "a read from the range's end differs from the whole log's tail")
}

// TestDetachedLogUnbounded: LogMax < 0 keeps the whole log.
func TestDetachedLogUnbounded(t *testing.T) {
	e, err := New(Options{StateDir: t.TempDir(), LogMax: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	p := start(t, e, env.Spec{Command: "head -c 16777216 /dev/zero | tr '\\0' x", Detach: true})
	assert.Equal(t, 16<<20, len(readAll(t, p, 0)))
	dir := p.(*detached).dir
	assert.GreaterOrEqual(t, diskBytes(t, filepath.Join(dir, fileLog)), int64(16<<20))
	_, err = os.Stat(filepath.Join(dir, fileOmitted))
	assert.True(t, os.IsNotExist(err), "%v", err)
}
