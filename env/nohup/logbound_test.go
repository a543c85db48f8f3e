package nohup_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
	"github.com/corralhq/corral/env/nohup/nohuptest"
)

// TestLogBounded: a process that writes far more than Options.LogMax
// leaves a log inside the sandbox that takes about LogMax on disk (a head
// and a tail; its size and offsets unchanged; the dropped range recorded
// in omitted), while the follow that read it got every byte. Where the
// sandbox has no fallocate that can punch holes (busybox's cannot), the
// whole log is kept, as documented.
func TestLogBounded(t *testing.T) {
	forShells(t, func(t *testing.T, sh nohuptest.Shell) {
		const max = 4 << 20
		const total = 40 << 20
		tr := &nohuptest.Local{Shell: sh.Path, Env: sh.Env}
		e, err := nohup.New(tr, nohup.Options{Name: "local-" + sh.Name, BaseDir: t.TempDir() + "/state", Shell: sh.Path, LogMax: max})
		require.NoError(t, err)
		t.Cleanup(func() { _ = e.Close() })
		p := start(t, e, env.Spec{Command: fmt.Sprintf(`yes "$(printf '%%063d' 0 | tr 0 x)" | head -c %d`, total)})
		r, err := p.Output(testCtx(t), 0)
		require.NoError(t, err)
		var n int64
		buf := make([]byte, 256<<10)
		for {
			k, err := r.Read(buf)
			if i := bytes.IndexByte(buf[:k], 0); i >= 0 {
				require.FailNow(t, fmt.Sprintf("the follow read a NUL at offset %d: bytes were dropped before it sent them", n+int64(i)))
			}
			n += int64(k)
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
		}
		r.Close()
		require.EqualValues(t, total, n)

		ref, err := p.Ref()
		require.NoError(t, err)
		var rd struct {
			Dir string `json:"dir"`
		}
		require.NoError(t, json.Unmarshal(ref.Data, &rd))
		log := filepath.Join(rd.Dir, "log")
		fi, err := os.Stat(log)
		require.NoError(t, err)
		assert.EqualValues(t, total, fi.Size(), "the log's size (and offsets) changed")
		var st syscall.Stat_t
		require.NoError(t, syscall.Stat(log, &st))
		used := st.Blocks * 512
		rec, recErr := os.ReadFile(filepath.Join(rd.Dir, "omitted"))

		if !punches(t, sh) {
			assert.GreaterOrEqual(t, used, int64(total), "no fallocate -p here, yet the log was cut")
			return
		}
		require.NoError(t, recErr, "no omitted record")
		assert.LessOrEqual(t, used, int64(max+(1<<20)+8192), "the log takes %d bytes on disk", used)
		var from, to int64
		_, err = fmt.Sscanf(string(rec), "%d %d", &from, &to)
		require.NoError(t, err, "%q", rec)
		head, tail := env.LogKeep(max)
		assert.EqualValues(t, (head+4095)/4096*4096, from)
		assert.GreaterOrEqual(t, to, int64(total)-tail-(1<<20)-4096)
		// A reader by offset: the head and the tail, zeros between.
		all := readAll(t, p, 0)
		require.Equal(t, total, len(all))
		assert.False(t, bytes.Contains(all[:from], []byte{0}), "the head holds a NUL")
		assert.False(t, bytes.Contains(all[to:], []byte{0}), "the tail holds a NUL")
		assert.True(t, bytes.Count(all[from:to], []byte{0}) == int(to-from), "the recorded range does not read as zeros")
	})
}

// punches reports whether the first fallocate in sh's PATH can punch a
// hole (util-linux's can, busybox's cannot).
func punches(t *testing.T, sh nohuptest.Shell) bool {
	f := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(f, make([]byte, 8192), 0o600))
	cmd := exec.Command(sh.Path, "-c", `fallocate -p -o 0 -l 4096 "$1"`, "sh", f)
	cmd.Env = sh.Env
	out, err := cmd.CombinedOutput()
	t.Logf("fallocate -p in %s's PATH: %v %s", sh.Name, err, strings.TrimSpace(string(out)))
	return err == nil
}
