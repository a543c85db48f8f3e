package nohup_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
	"github.com/corralhq/corral/env/nohup/nohuptest"
)

// lines returns "line 0\n" … "line n-1\n".
func lines(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// TestFollowStreamsOnOneCall: output that trickles out over time reaches
// the reader on one follow, not one transport call per chunk, and its exit
// comes with it: the Wait after costs nothing.
func TestFollowStreamsOnOneCall(t *testing.T) {
	forShells(t, func(t *testing.T, sh nohuptest.Shell) {
		e, tr := newEnv(t, sh)
		ctx := testCtx(t)
		p := start(t, e, env.Spec{Command: `i=0; while [ $i -lt 20 ]; do echo "line $i"; sleep 0.02; i=$((i+1)); done; exit 3`})
		before := tr.Execs()
		got := readAll(t, p, 0)
		calls := tr.Execs() - before
		require.Equal(t, lines(20), string(got))
		// One follow; a second when the first was slow to see the start.
		assert.LessOrEqual(t, calls, int64(2), "transport calls to read 20 chunks")
		before = tr.Execs()
		st, err := p.Wait(ctx)
		require.NoError(t, err)
		assert.Equal(t, env.Exited(3), st)
		assert.Equal(t, int64(0), tr.Execs()-before, "Wait after the follow reported the exit")
	})
}

// TestWaitFollowsTheExit: Wait on a process that runs for a while is one
// call that reports the exit when it happens, not a poll per LongPoll.
func TestWaitFollowsTheExit(t *testing.T) {
	e, tr := newEnv(t, nohuptest.Shells(t)[0])
	ctx := testCtx(t)
	p := start(t, e, env.Spec{Command: "sleep 1.5; exit 7"})
	before := tr.Execs()
	st, err := p.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, env.Exited(7), st)
	assert.Equal(t, int64(1), tr.Execs()-before, "transport calls of one Wait over 1.5 s (LongPoll is 1 s)")
}

// TestFollowIdleBudget: a follow that waited FollowIdle without output ends
// and the reader opens the next one, losing nothing; each next one is told
// how long the process has been quiet, so that it looks as seldom as the
// last one did.
func TestFollowIdleBudget(t *testing.T) {
	sh := nohuptest.Shells(t)[0]
	tr := &countingFollows{Local: &nohuptest.Local{Shell: sh.Path, Env: sh.Env}}
	e, err := nohup.New(tr, nohup.Options{BaseDir: t.TempDir() + "/s", Shell: sh.Path, FollowIdle: 100 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	// The quiet lasts until the test has seen three follows, the later
	// ones told of the quiet so far: a fixed sleep was too short on a
	// loaded CI machine, where a follow's exec took 300-400 ms to set up.
	// One follow would mean the budget is not kept.
	flag := filepath.Join(t.TempDir(), "go-on")
	p := start(t, e, env.Spec{Command: "echo a; until [ -e " + flag + " ]; do sleep 0.02; done; echo b"})
	before := tr.follows.Load()
	got := readAsync(t, p)
	require.Eventually(t, func() bool {
		return tr.follows.Load()-before >= 3 && tr.maxIdle.Load() >= 200
	}, time.Minute, 10*time.Millisecond, "follows during the quiet with a 100 ms idle budget, each told how long it has lasted")
	require.NoError(t, os.WriteFile(flag, nil, 0o600))
	require.Equal(t, "a\nb\n", string(<-got))
}

// readAsync reads p's whole output in the background and sends it on the
// channel it returns (nil after a failure, which it reports).
func readAsync(t *testing.T, p env.Process) <-chan []byte {
	got := make(chan []byte, 1)
	ctx := testCtx(t)
	go func() {
		r, err := p.Output(ctx, 0)
		if err != nil {
			assert.Fail(t, fmt.Sprintf("Output: %v", err))
			got <- nil
			return
		}
		defer r.Close()
		b, err := io.ReadAll(r)
		assert.NoError(t, err, "reading output")
		got <- b
	}()
	return got
}

// breakingTransport breaks the first follow after it passed on limit bytes,
// in the middle of a frame, as a dropped connection would.
type breakingTransport struct {
	*nohuptest.Local
	limit   int64
	broken  atomic.Bool
	follows atomic.Int64
}

type failAfter struct {
	w    io.Writer
	left int64
}

func (f *failAfter) Write(p []byte) (int, error) {
	if int64(len(p)) > f.left {
		n, _ := f.w.Write(p[:f.left])
		f.left = 0
		return n, errors.New("connection dropped")
	}
	f.left -= int64(len(p))
	return f.w.Write(p)
}

func (b *breakingTransport) Exec(ctx context.Context, script string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if strings.Contains(script, "\ncorral_follow ") {
		b.follows.Add(1)
	}
	if !strings.Contains(script, "\ncorral_follow ") || !b.broken.CompareAndSwap(false, true) {
		return b.Local.Exec(ctx, script, stdin, stdout, stderr)
	}
	_, _ = b.Local.Exec(ctx, script, stdin, &failAfter{w: stdout, left: b.limit}, stderr)
	return -1, fmt.Errorf("breaking: connection dropped: %w", env.ErrUnavailable)
}

// TestFollowBreaksMidFrame: a follow cut in the middle of a frame is
// resumed by polling from the last byte delivered: no gap, no duplicate.
func TestFollowBreaksMidFrame(t *testing.T) {
	sh := nohuptest.Shells(t)[0]
	tr := &breakingTransport{Local: &nohuptest.Local{Shell: sh.Path, Env: sh.Env}, limit: 5000}
	e, err := nohup.New(tr, nohup.Options{BaseDir: t.TempDir() + "/s", Shell: sh.Path})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	// The output begins once a follow is open, so that it passes through
	// one: on a loaded machine the start's own report could hold it all.
	flag := filepath.Join(t.TempDir(), "go-on")
	p := start(t, e, env.Spec{Command: `until [ -e ` + flag + ` ]; do sleep 0.02; done; i=0; while [ $i -lt 3000 ]; do echo "line $i"; i=$((i+1)); done; sleep 0.2`})
	got := readAsync(t, p)
	require.Eventually(t, func() bool { return tr.follows.Load() > 0 }, time.Minute, 10*time.Millisecond, "no follow opened")
	require.NoError(t, os.WriteFile(flag, nil, 0o600))
	require.Equal(t, lines(3000), string(<-got))
	require.True(t, tr.broken.Load(), "no follow was cut: the test did not test anything")
}

// TestFollowEndsWithItsReader: closing a reader while its follow waits ends
// the follow's shell inside the sandbox and gives the slot back.
func TestFollowEndsWithItsReader(t *testing.T) {
	e, _ := newEnv(t, nohuptest.Shells(t)[0])
	ctx := testCtx(t)
	p := start(t, e, env.Spec{Command: "echo hi; sleep 30"})
	ref, err := p.Ref()
	require.NoError(t, err)
	var state struct {
		Dir string `json:"dir"`
	}
	require.NoError(t, json.Unmarshal(ref.Data, &state))
	followers := func() int {
		n := 0
		ents, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, f := range ents {
			b, _ := os.ReadFile(f)
			if bytes.Contains(b, []byte("\ncorral_follow ")) && bytes.Contains(b, []byte(state.Dir)) {
				n++
			}
		}
		return n
	}
	for range 6 { // more than MaxLongPolls: each must give its slot back
		r, err := p.Output(ctx, 3) // past "hi\n": the Read waits on a follow
		require.NoError(t, err)
		read := make(chan error, 1)
		go func() {
			_, err := r.Read(make([]byte, 10))
			read <- err
		}()
		require.Eventually(t, func() bool { return followers() == 1 }, testTimeout, 10*time.Millisecond, "the reader's follow runs")
		require.NoError(t, r.Close())
		require.Error(t, <-read, "Read on a closed reader")
		require.Eventually(t, func() bool { return followers() == 0 }, testTimeout, 10*time.Millisecond, "follow still running after its reader closed")
	}
}

// countingFollows counts the follow calls.
type countingFollows struct {
	*nohuptest.Local
	follows atomic.Int64
	maxIdle atomic.Int64 // the largest quiet time a follow was given
}

func (c *countingFollows) Exec(ctx context.Context, script string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if _, line, ok := strings.Cut(script, "\ncorral_follow "); ok {
		c.follows.Add(1)
		// The last argument is the quiet time so far, in ms.
		f := strings.Fields(strings.TrimSpace(line))
		if n, err := strconv.ParseInt(strings.Trim(f[len(f)-1], "'"), 10, 64); err == nil && n > c.maxIdle.Load() {
			c.maxIdle.Store(n)
		}
	}
	return c.Local.Exec(ctx, script, stdin, stdout, stderr)
}

// TestFollowWithoutByteCountingDD: where dd cannot count in bytes, a follow
// could not send a frame's bytes safely: it says so at once, and the
// reader polls for the rest of its life, with the same result.
func TestFollowWithoutByteCountingDD(t *testing.T) {
	bin := t.TempDir()
	realDD, err := exec.LookPath("dd")
	require.NoError(t, err)
	fake := "#!/bin/sh\ncase \"$*\" in *iflag=*) echo 'dd: unknown operand iflag' >&2; exit 1 ;; esac\nexec " + realDD + " \"$@\"\n"
	require.NoError(t, os.WriteFile(filepath.Join(bin, "dd"), []byte(fake), 0o755))
	environ := append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	tr := &countingFollows{Local: &nohuptest.Local{Shell: "/bin/sh", Env: environ}}
	e, err := nohup.New(tr, nohup.Options{BaseDir: t.TempDir() + "/s"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	p := start(t, e, env.Spec{Command: `i=0; while [ $i -lt 300 ]; do echo "line $i"; i=$((i+1)); [ $((i % 50)) = 0 ] && sleep 0.1; done`})
	require.Equal(t, lines(300), string(readAll(t, p, 0)))
	require.Equal(t, int64(1), tr.follows.Load(), "follows opened by one reader where dd cannot count bytes")
}
