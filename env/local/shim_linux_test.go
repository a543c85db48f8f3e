package local

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startDetached starts a detached command and returns its handle.
func startDetachedT(t *testing.T, e *Env, spec env.Spec) *detached {
	t.Helper()
	spec.Detach = true
	p := start(t, e, spec)
	d, ok := p.(*detached)
	require.True(t, ok, "a detached start returns a *detached")
	return d
}

func serverAlive(st shimState) bool { return st.shim().Alive() }

// TestShimServerShared: every Env of a state directory uses the one
// server, also after the Env that started it closed.
func TestShimServerShared(t *testing.T) {
	stateDir := t.TempDir()
	e1 := newTestEnvIn(t, stateDir, false)
	e2 := newTestEnvIn(t, stateDir, false)
	m := marker()
	a := startDetachedT(t, e1, env.Spec{Command: "exec sleep " + m})
	b := startDetachedT(t, e2, env.Spec{Command: "exec sleep " + m})
	assert.Equal(t, a.st.ShimPID, b.st.ShimPID, "two Envs of one state directory use one server")
	ref, err := a.Ref()
	require.NoError(t, err)
	require.NoError(t, e1.Close())
	// a's handle went with e1 (its cleanup's kill cannot reach it any
	// more), and a runs on, as a detached process does: end it from e2.
	t.Cleanup(func() {
		if p, err := e2.Attach(testCtx(t), ref); err == nil {
			_ = p.Signal(context.Background(), env.SIGKILL)
			_, _ = p.Wait(testCtx(t))
			_ = p.Release()
		}
	})
	c := startDetachedT(t, e2, env.Spec{Command: "echo third"})
	assert.Equal(t, a.st.ShimPID, c.st.ShimPID, "the server outlives the Env that started it")
	assert.Equal(t, env.Exited(0), wait(t, c))
	assert.Equal(t, "third\n", readAll(t, c, 0))
}

// TestShimServerConcurrentEnvs: Envs that start at the same moment, in a
// state directory with no server yet, still share one.
func TestShimServerConcurrentEnvs(t *testing.T) {
	stateDir := t.TempDir()
	const n = 6
	pids := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		e := newTestEnvIn(t, stateDir, false)
		wg.Go(func() {
			p, err := e.Start(testCtx(t), env.Spec{Command: "true", Detach: true})
			if !assert.NoError(t, err) {
				return
			}
			pids[i] = p.(*detached).st.ShimPID
			_, err = p.Wait(testCtx(t))
			assert.NoError(t, err)
			_ = p.Release()
		})
	}
	wg.Wait()
	for i := range pids {
		assert.Equal(t, pids[0], pids[i], "process %d ran under another server", i)
	}
}

// TestShimServerDeath: a killed server leaves its processes lost (the
// error names the shim), and the next start gets a new server.
func TestShimServerDeath(t *testing.T) {
	e := newTestEnv(t, false)
	m := marker()
	d := startDetachedT(t, e, env.Spec{Command: "exec sleep " + m})
	require.NoError(t, syscall.Kill(d.st.ShimPID, syscall.SIGKILL))
	_, err := d.Wait(testCtx(t))
	require.ErrorIs(t, err, errLost)
	assert.Contains(t, err.Error(), "shim")
	// The orphaned command is still ours to kill.
	require.NoError(t, d.Signal(testCtx(t), env.SIGKILL))

	n := startDetachedT(t, e, env.Spec{Command: "echo again; exit 3"})
	assert.NotEqual(t, d.st.ShimPID, n.st.ShimPID, "a new server runs the next start")
	assert.Equal(t, env.Exited(3), wait(t, n))
	assert.Equal(t, "again\n", readAll(t, n, 0))
}

// TestShimServerLeavesWhenIdle: once nothing runs and no Env is connected,
// the server is gone, so no process is left behind.
func TestShimServerLeavesWhenIdle(t *testing.T) {
	stateDir := t.TempDir()
	e := newTestEnvIn(t, stateDir, false)
	d := startDetachedT(t, e, env.Spec{Command: "exec sleep " + marker()})
	require.NoError(t, d.Signal(testCtx(t), env.SIGKILL))
	assert.Equal(t, env.Signaled(env.SIGKILL), wait(t, d))
	assert.True(t, serverAlive(d.st), "the server stays while an Env is connected")
	require.NoError(t, e.Close())
	require.Eventually(t, func() bool { return !serverAlive(d.st) }, 30*time.Second, 10*time.Millisecond,
		"the server did not leave after the last Env closed")
	_, err := os.Stat(filepath.Join(stateDir, shimName(".sock")))
	assert.ErrorIs(t, err, os.ErrNotExist, "the server removes its socket")
}

// TestShimServerStaysForProcesses: a server with a running process stays
// when every Env is gone, and the process can be driven from a new Env.
func TestShimServerStaysForProcesses(t *testing.T) {
	stateDir := t.TempDir()
	e1 := newTestEnvIn(t, stateDir, false)
	d := startDetachedT(t, e1, env.Spec{Command: "read x; echo \"got $x\"", Stdin: true})
	ref, err := d.Ref()
	require.NoError(t, err)
	require.NoError(t, e1.Close())
	e2 := newTestEnvIn(t, stateDir, false)
	p, err := e2.Attach(testCtx(t), ref)
	require.NoError(t, err)
	defer p.Release()
	assert.True(t, serverAlive(d.st))
	_, err = p.Write(testCtx(t), []byte("late\n"))
	require.NoError(t, err)
	assert.Equal(t, env.Exited(0), wait(t, p))
	assert.Equal(t, "got late\n", readAll(t, p, 0))
}

// TestShimServerLongStateDir: a state directory whose socket path does
// not fit sockaddr_un gets an abstract socket.
func TestShimServerLongStateDir(t *testing.T) {
	stateDir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	require.NoError(t, os.MkdirAll(stateDir, 0o700))
	require.True(t, strings.HasPrefix(shimAddr(stateDir).Name, "@"), "an abstract socket for a long path")
	e := newTestEnvIn(t, stateDir, false)
	d := startDetachedT(t, e, env.Spec{Command: "echo long"})
	assert.Equal(t, env.Exited(0), wait(t, d))
	assert.Equal(t, "long\n", readAll(t, d, 0))
	e2 := newTestEnvIn(t, stateDir, false)
	d2 := startDetachedT(t, e2, env.Spec{Command: "true"})
	assert.Equal(t, d.st.ShimPID, d2.st.ShimPID)
	wait(t, d2)
}

var sigLine = regexp.MustCompile(`(?m)^(SigIgn|SigBlk):\s*([0-9a-f]+)$`)

// sigMasks returns the SigIgn and SigBlk masks of /proc/PID/status text.
func sigMasks(t *testing.T, status string) (ignored, blocked uint64) {
	t.Helper()
	found := sigLine.FindAllStringSubmatch(strings.ReplaceAll(status, "\r", ""), -1)
	require.Len(t, found, 2, "SigIgn and SigBlk in %q", status)
	for _, f := range found {
		v, err := strconv.ParseUint(f[2], 16, 64)
		require.NoError(t, err)
		if f[1] == "SigIgn" {
			ignored = v
		} else {
			blocked = v
		}
	}
	return ignored, blocked
}

// TestDetachedSignalDispositions: a detached command (what it execs)
// ignores nothing a plain sh -c started by this process does not, and
// blocks nothing at all: the server clears the mask for every fork
// (under the race detector a Go thread may block almost everything, so
// even the plain sh -c can show a full mask).
func TestDetachedSignalDispositions(t *testing.T) {
	const cmd = "exec grep -E '^Sig(Ign|Blk):' /proc/self/status"
	out, err := exec.Command("/bin/sh", "-c", cmd).Output()
	require.NoError(t, err)
	wantIgn, _ := sigMasks(t, string(out))
	e := newTestEnv(t, false)
	for _, pty := range []*env.WindowSize{nil, {Rows: 24, Cols: 80}} {
		for range 20 {
			d := startDetachedT(t, e, env.Spec{Command: cmd, PTY: pty})
			wait(t, d)
			ign, blk := sigMasks(t, readAll(t, d, 0))
			assert.Zero(t, ign&^wantIgn, "pty=%v: ignored %016x, a plain sh -c %016x", pty != nil, ign, wantIgn)
			assert.Zero(t, blk, "pty=%v: blocked %016x", pty != nil, blk)
			require.NoError(t, d.Remove(testCtx(t)))
		}
	}
}

// TestDetachedPTYReattach: output, stdin (Write, CloseStdin) and Resize
// work through a handle attached from another Env.
func TestDetachedPTYReattach(t *testing.T) {
	stateDir := t.TempDir()
	e1 := newTestEnvIn(t, stateDir, false)
	// The size is read after the line, so a Resize before the Write shows.
	script := `stty -echo
echo ready
read -r line
echo "got:$line"
echo "size=$(stty size </dev/tty)"
cat
echo "cat-ended"
exit 6`
	d := startDetachedT(t, e1, env.Spec{Command: script, PTY: &env.WindowSize{Rows: 24, Cols: 80}, Stdin: true})
	ref, err := d.Ref()
	require.NoError(t, err)
	require.NoError(t, d.Release())
	require.NoError(t, e1.Close())

	e2 := newTestEnvIn(t, stateDir, false)
	p, err := e2.Attach(testCtx(t), ref)
	require.NoError(t, err)
	defer p.Release()
	waitOutput := func(want string) {
		t.Helper()
		require.Eventually(t, func() bool { return strings.Contains(readSoFar(t, p), want) },
			30*time.Second, 10*time.Millisecond, "output never showed %q: %q", want, readSoFar(t, p))
	}
	waitOutput("ready")
	require.NoError(t, p.Resize(testCtx(t), env.WindowSize{Rows: 42, Cols: 101}))
	_, err = p.Write(testCtx(t), []byte("typed\n"))
	require.NoError(t, err)
	waitOutput("got:typed")
	waitOutput("size=42 101")
	require.NoError(t, p.CloseStdin(testCtx(t)))
	assert.Equal(t, env.Exited(6), wait(t, p))
	assert.Contains(t, readAll(t, p, 0), "cat-ended")
	require.ErrorIs(t, p.Resize(testCtx(t), env.WindowSize{Rows: 1, Cols: 1}), env.ErrExited)
}

// readSoFar returns the output written so far, without waiting for more.
func readSoFar(t *testing.T, p env.Process) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	r, err := p.Output(ctx, 0)
	require.NoError(t, err)
	defer r.Close()
	var b strings.Builder
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}
