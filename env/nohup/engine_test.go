package nohup_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

func marker() string { return strconv.Itoa(40000000 + rand.IntN(9999999)) }

func dash() nohuptest.Shell {
	return nohuptest.Shell{Name: "sh", Path: "/bin/sh", Env: os.Environ()}
}

// TestOutputBytesOnTheWire checks that reading a 100 MiB log incrementally
// moves about 100 MiB across the transport: each poll sends only new bytes,
// and the first chunk Start brings back is not sent again.
func TestOutputBytesOnTheWire(t *testing.T) {
	e, tr := newEnv(t, dash())
	const size = 100 << 20
	before := tr.OutBytes()
	p := start(t, e, env.Spec{Command: fmt.Sprintf("head -c %d /dev/zero | tr '\\0' 'x'", size)})
	if st, err := p.Wait(testCtx(t)); err != nil || !st.Success() {
		require.FailNow(t, fmt.Sprintf("Wait = %v, %v", st, err))
	}
	r, err := p.Output(testCtx(t), 0)
	require.NoError(t, err)
	n, err := io.Copy(io.Discard, r)
	r.Close()
	require.Truef(t, err == nil && n == size, "read %d bytes, %v; want %d", n, err, size)
	moved := tr.OutBytes() - before
	require.Truef(t, moved >= size && moved <= size+size/100, "%d bytes crossed the transport to read %d (want at most 1%% overhead)", moved, size)
	t.Logf("%d bytes crossed the transport for %d bytes of output", moved, size)
}

// TestOutputResumesWithoutGapOrDuplicate reads a live stream in pieces
// from successive offsets while the process writes.
func TestOutputResumesWithoutGapOrDuplicate(t *testing.T) {
	forShells(t, func(t *testing.T, sh nohuptest.Shell) {
		e, _ := newEnv(t, sh)
		p := start(t, e, env.Spec{Command: `i=0; while [ $i -lt 3000 ]; do echo "line $i"; i=$((i+1)); done`})
		var got []byte
		for {
			r, err := p.Output(testCtx(t), int64(len(got)))
			require.NoError(t, err)
			buf := make([]byte, 777)
			n, err := r.Read(buf)
			r.Close()
			got = append(got, buf[:n]...)
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
		}
		var want bytes.Buffer
		for i := range 3000 {
			fmt.Fprintf(&want, "line %d\n", i)
		}
		if !bytes.Equal(got, want.Bytes()) {
			require.FailNow(t, fmt.Sprintf("resumed output differs: got %d bytes, want %d", len(got), want.Len()))
		}
	})
}

func TestStdin(t *testing.T) {
	forShells(t, func(t *testing.T, sh nohuptest.Shell) {
		e, _ := newEnv(t, sh)
		ctx := testCtx(t)
		p := start(t, e, env.Spec{Command: "cat; echo done", Stdin: true})
		for _, s := range []string{"a'b\n", "$(x)\n", "\x00\xff\n"} {
			n, err := p.Write(ctx, []byte(s))
			require.Truef(t, err == nil && n == len(s), "Write(%q) = %d, %v", s, n, err)
		}
		require.NoError(t, p.CloseStdin(ctx))
		require.NoError(t, p.CloseStdin(ctx), "second CloseStdin")
		if _, err := p.Write(ctx, []byte("late")); !errors.Is(err, env.ErrStdinClosed) {
			require.FailNow(t, fmt.Sprintf("Write after CloseStdin = %v, want ErrStdinClosed", err))
		}
		if st, err := p.Wait(ctx); err != nil || !st.Success() {
			require.FailNow(t, fmt.Sprintf("Wait = %v, %v", st, err))
		}
		if got, want := string(readAll(t, p, 0)), "a'b\n$(x)\n\x00\xff\ndone\n"; got != want {
			require.FailNow(t, fmt.Sprintf("output %q, want %q", got, want))
		}
		if _, err := p.Write(ctx, []byte("x")); !errors.Is(err, env.ErrStdinClosed) && !errors.Is(err, env.ErrExited) {
			require.FailNow(t, fmt.Sprintf("Write after exit = %v", err))
		}
		q := start(t, e, env.Spec{Command: "cat; echo eof"})
		_, err := q.Write(ctx, []byte("x"))
		require.Truef(t, errors.Is(err, env.ErrStdinClosed), "Write without Spec.Stdin = %v, want ErrStdinClosed", err)
		got := string(readAll(t, q, 0))
		require.Truef(t, got == "eof\n", "no-stdin process read %q, want EOF at once", got)
	})
}

// TestSignalReachesEscapees starts a tree with a setsid escapee and a
// double-forked daemon, kills it, and checks Survivors before and after.
func TestSignalReachesEscapees(t *testing.T) {
	forShells(t, func(t *testing.T, sh nohuptest.Shell) {
		e, _ := newEnv(t, sh)
		ctx := testCtx(t)
		m1, m2, m3 := marker(), marker(), marker()
		cmd := fmt.Sprintf("setsid sleep %s & (sleep %s &) ; sleep %s", m1, m2, m3)
		p := start(t, e, env.Spec{Command: cmd})
		var pids []int
		var err error
		require.Eventually(t, func() bool {
			pids, err = p.Survivors(ctx)
			return err != nil || markersAlive(t, m1, m2, m3) == 3
		}, testTimeout, 20*time.Millisecond, "waiting for the tree to start")
		require.NoError(t, err, "Survivors")
		if len(pids) < 4 { // sh (or sleep m3 after exec) + 3 sleeps at least
			t.Logf("survivors before kill: %v", pids)
		}
		require.NoError(t, p.Signal(ctx, env.SIGTERM))
		st, err := p.Wait(ctx)
		require.Truef(t, err == nil && st.Signal == env.SIGTERM, "Wait = %v, %v; want killed by TERM", st, err)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			var left []int
			if left, err = p.Survivors(ctx); err != nil {
				return // fails below, at once
			}
			assert.Empty(c, left, "Survivors")
			assert.Zero(c, markersAlive(t, m1, m2, m3), "marked processes alive")
		}, testTimeout, 20*time.Millisecond, "waiting for the tree to be gone")
		require.NoError(t, err, "Survivors")
		if err := p.Signal(ctx, env.SIGTERM); !errors.Is(err, env.ErrExited) {
			require.FailNow(t, fmt.Sprintf("Signal after exit = %v, want ErrExited", err))
		}
	})
}

// markersAlive counts live processes whose command line holds one of the
// markers as an argument.
func markersAlive(t *testing.T, markers ...string) int {
	t.Helper()
	n := 0
	ents, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range ents {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(strings.TrimSuffix(f, "cmdline") + "stat")
		if err != nil || bytes.Contains(stat[bytes.LastIndexByte(stat, ')'):], []byte(") Z")) {
			continue
		}
		for _, a := range bytes.Split(b, []byte{0}) {
			if slices.Contains(markers, string(a)) {
				n++
			}
		}
	}
	return n
}

func TestSpecErrors(t *testing.T) {
	e, _ := newEnv(t, dash())
	ctx := testCtx(t)
	_, err := e.Start(ctx, env.Spec{Command: "true", Dir: "/nonexistent/corral-nohup"})
	var se *env.SpecError
	require.Truef(t, errors.As(err, &se) && se.Field == "Dir" && errors.Is(err, env.ErrDirNotFound) && errors.Is(err, env.ErrInvalidSpec), "missing Dir: %v", err)
	if _, err := e.Start(ctx, env.Spec{Command: ""}); !errors.Is(err, env.ErrInvalidSpec) {
		require.FailNow(t, fmt.Sprintf("empty command: %v", err))
	}
	// A PTY without script or python3 in the sandbox: TestPTYMissing.
	// A relative Dir that looks like an option or "-" is a directory name.
	wd := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(wd, "-"), 0o755))
	tr := &nohuptest.Local{Shell: "/bin/sh", Env: os.Environ()}
	e2, err := nohup.New(&dirTransport{Local: tr, dir: wd}, nohup.Options{BaseDir: t.TempDir() + "/s"})
	require.NoError(t, err)
	defer e2.Close()
	p := start(t, e2, env.Spec{Command: "pwd", Dir: "-"})
	got := string(readAll(t, p, 0))
	require.Truef(t, got == wd+"/-\n", "pwd in Dir \"-\" = %q", got)
}

// TestStartWithoutStateDir: a base directory the launcher cannot create
// (here under a file) is refused as such, saying what to do, not as an
// unknown reply of the wrapper.
func TestStartWithoutStateDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	tr := &nohuptest.Local{Shell: "/bin/sh", Env: os.Environ()}
	e, err := nohup.New(tr, nohup.Options{Name: "nostate", BaseDir: file + "/state"})
	require.NoError(t, err)
	defer e.Close()
	_, err = e.Start(testCtx(t), env.Spec{Command: "true"})
	require.Error(t, err)
	require.Contains(t, err.Error(), "cannot create or write a process directory under "+file+"/state")
	require.NotContains(t, err.Error(), "wrapper failed")
}

// dirTransport runs scripts in a chosen working directory, like a
// sandbox's default directory.
type dirTransport struct {
	*nohuptest.Local
	dir string
}

func (d *dirTransport) Exec(ctx context.Context, script string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	return d.Local.Exec(ctx, "cd '"+d.dir+"' || exit 99\n"+script, stdin, stdout, stderr)
}

func TestReattachAndRemove(t *testing.T) {
	forShells(t, func(t *testing.T, sh nohuptest.Shell) {
		base := t.TempDir() + "/state"
		tr := &nohuptest.Local{Shell: sh.Path, Env: sh.Env}
		e1, err := nohup.New(tr, nohup.Options{Name: "x", BaseDir: base, Shell: sh.Path})
		require.NoError(t, err)
		ctx := testCtx(t)
		p, err := e1.Start(ctx, env.Spec{Command: "echo one; read x; echo two; exit 5", Stdin: true, Detach: true})
		require.NoError(t, err)
		ref, err := p.Ref()
		require.NoError(t, err)
		if err := p.Remove(ctx); err == nil {
			require.FailNow(t, "Remove of a running process succeeded")
		}
		e1.Close()
		if _, err := p.Wait(ctx); !errors.Is(err, env.ErrReleased) {
			require.FailNow(t, fmt.Sprintf("Wait after Close = %v, want ErrReleased", err))
		}

		e2, err := nohup.New(tr, nohup.Options{Name: "x", BaseDir: base, Shell: sh.Path})
		require.NoError(t, err)
		defer e2.Close()
		q, err := e2.Attach(ctx, ref)
		require.NoError(t, err)
		if _, err := q.Write(ctx, []byte("go\n")); err != nil {
			require.FailNow(t, fmt.Sprint(err))
		}
		if st, err := q.Wait(ctx); err != nil || st != env.Exited(5) {
			require.FailNow(t, fmt.Sprintf("Wait = %v, %v", st, err))
		}
		got := string(readAll(t, q, 4))
		require.Truef(t, got == "two\n", "output from offset 4 = %q", got)
		require.NoError(t, q.Remove(ctx))
		if _, err := e2.Attach(ctx, ref); !errors.Is(err, env.ErrNotFound) {
			require.FailNow(t, fmt.Sprintf("Attach after Remove = %v, want ErrNotFound", err))
		}

		// Hostile ref data is rejected before anything runs.
		var data map[string]any
		require.NoError(t, json.Unmarshal(ref.Data, &data))
		for _, bad := range []map[string]any{
			{"dir": "/etc"}, {"dir": base + "/../x"}, {"dir": base + "/$(touch x)"}, {"tag": "'; rm -rf /"},
			{"pid": -1}, {"v": 2}, {"extra": 1},
		} {
			d := map[string]any{}
			for k, v := range data {
				d[k] = v
			}
			for k, v := range bad {
				d[k] = v
			}
			b, _ := json.Marshal(d)
			before := tr.Execs()
			_, err := e2.Attach(ctx, env.Ref{Env: "x", Data: b})
			assert.Errorf(t, err, "Attach accepted %v", bad)
			assert.Truef(t, tr.Execs() == before, "Attach with %v ran a script before rejecting it", bad)
		}
	})
}

// TestLostWrapper kills the wrapper (and the stopped parent) with SIGKILL:
// Wait must say the process is lost instead of waiting forever.
func TestLostWrapper(t *testing.T) {
	e, _ := newEnv(t, dash())
	ctx := testCtx(t)
	m := marker()
	p := start(t, e, env.Spec{Command: "sleep " + m})
	ref, _ := p.Ref()
	var rd struct {
		WPID int `json:"wpid"`
	}
	if err := json.Unmarshal(ref.Data, &rd); err != nil || rd.WPID <= 0 {
		require.FailNow(t, fmt.Sprintf("ref data %s: %v", ref.Data, err))
	}
	require.NoError(t, exec.Command("kill", "-KILL", strconv.Itoa(rd.WPID)).Run())
	_, err := p.Wait(ctx)
	require.Truef(t, errors.Is(err, env.ErrNotFound) && strings.Contains(err.Error(), "lost"), "Wait after the wrapper died = %v, want a lost error matching ErrNotFound", err)
	// The stopped parent was resumed: it reaps the command once killed,
	// and nothing of the tree is left stopped or running.
	require.NoError(t, p.Signal(ctx, env.SIGKILL))
	require.Eventually(t, func() bool { return markersAlive(t, m) == 0 },
		testTimeout, 20*time.Millisecond, "waiting for the killed command to end")
	b, err := os.ReadFile(filepath.Join(dirOf(t, p), "parent"))
	require.NoError(t, err)
	pid, _, _ := strings.Cut(string(b), " ")
	require.Eventually(t, func() bool {
		if _, err := os.Stat("/proc/" + pid + "/cmdline"); err != nil {
			return true
		}
		st, _ := os.ReadFile("/proc/" + pid + "/stat")
		return bytes.Contains(st, []byte(") Z")) // gone, waiting for PID 1 to reap it
	}, testTimeout, 20*time.Millisecond, "waiting for the parent %s to end", pid)
}

func dirOf(t *testing.T, p env.Process) string {
	ref, err := p.Ref()
	require.NoError(t, err)
	var rd struct{ Dir string }
	require.NoError(t, json.Unmarshal(ref.Data, &rd))
	return rd.Dir
}

// flakyTransport fails every other Exec with ErrUnavailable, or all of them
// with ErrSandboxGone once gone is set.
type flakyTransport struct {
	*nohuptest.Local
	n    atomic.Int64
	gone atomic.Bool
}

func (f *flakyTransport) Exec(ctx context.Context, script string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if f.gone.Load() {
		return -1, fmt.Errorf("flaky: container removed: %w", env.ErrSandboxGone)
	}
	if f.n.Add(1)%2 == 0 {
		return -1, fmt.Errorf("flaky: connection dropped: %w", env.ErrUnavailable)
	}
	return f.Local.Exec(ctx, script, stdin, stdout, stderr)
}

// cutTransport runs every start's launcher to its end, then passes on only
// its first line (the ok line) and fails: with exit status 2, as ash does
// when a fork for the report is refused, or with a lost connection.
type cutTransport struct {
	*nohuptest.Local
	lost bool
}

func (c *cutTransport) Exec(ctx context.Context, script string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if !strings.Contains(script, "\ncorral_launch ") {
		return c.Local.Exec(ctx, script, stdin, stdout, stderr)
	}
	var out bytes.Buffer
	if _, err := c.Local.Exec(ctx, script, stdin, &out, stderr); err != nil {
		return -1, err
	}
	first, _, _ := bytes.Cut(out.Bytes(), []byte("\n"))
	_, _ = stdout.Write(append(first, '\n'))
	if c.lost {
		return -1, fmt.Errorf("cut: connection dropped: %w", env.ErrUnavailable)
	}
	_, _ = io.WriteString(stderr, "sh: can't fork")
	return 2, nil
}

// TestStartFailingAfterItsOkLine: once the launcher reported the command
// started, a failure of the rest of its script must not make Start fail,
// or a running command would be left that nobody tracks.
func TestStartFailingAfterItsOkLine(t *testing.T) {
	for _, lost := range []bool{false, true} {
		t.Run(map[bool]string{false: "exit_2", true: "connection_lost"}[lost], func(t *testing.T) {
			ct := &cutTransport{Local: &nohuptest.Local{Shell: "/bin/sh", Env: os.Environ()}, lost: lost}
			e, err := nohup.New(ct, nohup.Options{BaseDir: t.TempDir() + "/s"})
			require.NoError(t, err)
			defer e.Close()
			ctx := testCtx(t)
			p, err := e.Start(ctx, env.Spec{Command: "echo hello; exit 4"})
			require.NoError(t, err, "Start after the launcher reported the command")
			defer p.Release()
			if st, err := p.Wait(ctx); err != nil || st != env.Exited(4) {
				require.FailNow(t, fmt.Sprintf("Wait = %v, %v; want exit 4", st, err))
			}
			got := string(readAll(t, p, 0))
			require.Truef(t, got == "hello\n", "output = %q", got)
		})
	}
}

func TestTransportErrors(t *testing.T) {
	ft := &flakyTransport{Local: &nohuptest.Local{Shell: "/bin/sh", Env: os.Environ()}}
	e, err := nohup.New(ft, nohup.Options{BaseDir: t.TempDir() + "/s"})
	require.NoError(t, err)
	defer e.Close()
	ctx := testCtx(t)
	var p env.Process
	for p == nil { // Start is not retried: it is not idempotent
		p, err = e.Start(ctx, env.Spec{Command: "echo hello; exit 4"})
		require.True(t, err == nil || errors.Is(err, env.ErrUnavailable), fmt.Sprintln(err))
	}
	defer p.Release()
	if st, err := p.Wait(ctx); err != nil || st != env.Exited(4) {
		require.FailNow(t, fmt.Sprintf("Wait through a flaky transport = %v, %v", st, err))
	}
	got := string(readAll(t, p, 0))
	require.Truef(t, got == "hello\n", "output through a flaky transport = %q", got)
	ft.gone.Store(true)
	if _, err := p.Survivors(ctx); !errors.Is(err, env.ErrSandboxGone) {
		require.FailNow(t, fmt.Sprintf("Survivors on a gone sandbox = %v", err))
	}
	// Wait already saw the exit: its status is cached, no round trip.
	if st, err := p.Wait(ctx); err != nil || st != env.Exited(4) {
		require.FailNow(t, fmt.Sprintf("cached status after the sandbox went = %v, %v", st, err))
	}
	if _, err := p.Output(ctx, 0); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	r, _ := p.Output(ctx, 0)
	defer r.Close()
	if _, err := io.ReadAll(r); !errors.Is(err, env.ErrSandboxGone) {
		require.FailNow(t, fmt.Sprintf("Output on a gone sandbox = %v, want ErrSandboxGone", err))
	}
}

func TestSweep(t *testing.T) {
	base := t.TempDir() + "/state"
	tr := &nohuptest.Local{Shell: "/bin/sh", Env: os.Environ()}
	e1, _ := nohup.New(tr, nohup.Options{BaseDir: base, Retention: -1})
	defer e1.Close()
	ctx := testCtx(t)
	p := start(t, e1, env.Spec{Command: "true"})
	if _, err := p.Wait(ctx); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	ref, _ := p.Ref()
	var rd struct{ Dir string }
	_ = json.Unmarshal(ref.Data, &rd)
	old := time.Now().Add(-3 * time.Hour)
	require.NoError(t, os.Chtimes(rd.Dir+"/exit", old, old))
	keep := base + "/not-a-state-dir"
	require.NoError(t, os.Mkdir(keep, 0o700))
	_ = os.WriteFile(keep+"/exit", nil, 0o600)
	_ = os.Chtimes(keep+"/exit", old, old)

	e2, _ := nohup.New(tr, nohup.Options{BaseDir: base, Retention: time.Hour})
	defer e2.Close()
	start(t, e2, env.Spec{Command: "true"})
	if _, err := os.Stat(rd.Dir); !os.IsNotExist(err) {
		require.FailNow(t, fmt.Sprintf("finished dir older than Retention was kept: %v", err))
	}
	_, err := os.Stat(keep)
	require.NoError(t, err, "sweep removed a directory it does not own")
}

// BenchmarkExitDetection measures the time from the process ending (its
// stdin closed: `read` returns and it exits) to Wait returning.
func BenchmarkExitDetection(b *testing.B) {
	tr := &nohuptest.Local{Shell: "/bin/sh", Env: os.Environ()}
	e, err := nohup.New(tr, nohup.Options{BaseDir: b.TempDir() + "/s"})
	require.NoError(b, err)
	defer e.Close()
	ctx := context.Background()
	var lat []time.Duration
	for b.Loop() {
		p, err := e.Start(ctx, env.Spec{Command: "read x", Stdin: true})
		require.NoError(b, err)
		waited := make(chan error, 1)
		go func() { _, err := p.Wait(ctx); waited <- err }()
		require.NoError(b, p.CloseStdin(ctx))
		t0 := time.Now()
		require.NoError(b, <-waited)
		lat = append(lat, time.Since(t0))
		_ = p.Remove(ctx)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "ms-median-exit-detect")
}

// TestStdinHolderEndsWithProcess checks that the process holding the stdin
// FIFO open does not outlive a command that exits without CloseStdin.
func TestStdinHolderEndsWithProcess(t *testing.T) {
	forShells(t, func(t *testing.T, sh nohuptest.Shell) {
		e, _ := newEnv(t, sh)
		ctx := testCtx(t)
		p := start(t, e, env.Spec{Command: "exit 0", Stdin: true})
		if _, err := p.Wait(ctx); err != nil {
			require.FailNow(t, fmt.Sprint(err))
		}
		b, err := os.ReadFile(filepath.Join(dirOf(t, p), "holder"))
		require.NoError(t, err)
		pid, _, _ := strings.Cut(string(b), " ")
		require.Eventually(t, func() bool {
			st, err := os.ReadFile("/proc/" + pid + "/stat")
			return err != nil || bytes.Contains(st, []byte(") Z"))
		}, testTimeout, 20*time.Millisecond, "waiting for the stdin holder %s to end with the command", pid)
	})
}

// TestDefaultBaseDir checks that the default BaseDir is resolved inside the
// sandbox as /tmp/.corral-$UID, private to the user.
func TestDefaultBaseDir(t *testing.T) {
	e, err := nohup.New(&nohuptest.Local{}, nohup.Options{})
	require.NoError(t, err)
	defer e.Close()
	ctx := testCtx(t)
	p := start(t, e, env.Spec{Command: "true"})
	if _, err := p.Wait(ctx); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	dir := dirOf(t, p)
	want := fmt.Sprintf("/tmp/.corral-%d/", os.Getuid())
	require.Truef(t, strings.HasPrefix(dir, want), "state dir %s, want under %s", dir, want)
	fi, err := os.Stat(dir)
	require.Truef(t, err == nil && fi.Mode().Perm() == 0o700, "state dir mode: %v, %v; want 0700", fi, err)
	require.NoError(t, p.Remove(ctx))
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		require.FailNow(t, fmt.Sprintf("Remove left %s: %v", dir, err))
	}
}

// TestMachineryArgvHoldsNoSpec checks that neither the command line nor
// environment values appear in the argv of the wrapper processes: `ps`
// must not show secrets, and a scan for a word of the command must find
// the command only.
func TestMachineryArgvHoldsNoSpec(t *testing.T) {
	e, _ := newEnv(t, dash())
	ctx := testCtx(t)
	m, secret := marker(), "s3cret-"+marker()
	p := start(t, e, env.Spec{Command: "sleep " + m, Env: []string{"API_TOKEN=" + secret}})
	var holders []string
	machinery := false
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		holders = nil
		ents, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, f := range ents {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			if bytes.Contains(b, []byte(secret)) {
				assert.Fail(t, fmt.Sprintf("%s holds the env value: %q", f, b)) // Errorf: safe off the test goroutine
			}
			if bytes.Contains(b, []byte(m)) {
				holders = append(holders, fmt.Sprintf("%s=%q", f, b))
			}
		}
		running := false
		for _, h := range holders {
			machinery = machinery || strings.Contains(h, "corral")
			running = running || strings.Contains(h, `"sleep\x00`+m)
		}
		if machinery {
			return // fails below, at once
		}
		assert.True(c, running, "command seen running; argv holding its marker: %v", holders)
	}, testTimeout, 20*time.Millisecond, "waiting for the command to run")
	require.False(t, machinery, "the wrapper's argv holds the command: %v", holders)
	require.NoError(t, p.Signal(ctx, env.SIGKILL))
}

// BenchmarkForegroundTrue runs `true` in the foreground (Start, Output
// drained, Wait, Remove) on the local transport: the cost of the scripts
// themselves, without a container engine or a network in between. It
// reports the transport round trips per run (execs/op).
func BenchmarkForegroundTrue(b *testing.B) {
	b.Run("sessions", func(b *testing.B) { benchForegroundTrue(b, &nohuptest.Local{Shell: "/bin/sh", Env: os.Environ()}) })
	b.Run("resident", func(b *testing.B) {
		tr := &nohuptest.Local{Shell: "/bin/sh", Env: os.Environ(), Resident: true}
		benchForegroundTrue(b, tr)
	})
}

// benchForegroundTrue also reports armed-%: the share of starts that found
// their directory armed (see corral_arm in sh/spares.sh).
func benchForegroundTrue(b *testing.B, tr *nohuptest.Local) {
	base := b.TempDir() + "/s"
	e, err := nohup.New(tr, nohup.Options{BaseDir: base})
	require.NoError(b, err)
	defer e.Close()
	ctx := context.Background()
	execs, armed := tr.Execs(), 0
	for b.Loop() {
		p, err := e.Start(ctx, env.Spec{Command: "true"})
		require.NoError(b, err)
		r, err := p.Output(ctx, 0)
		require.NoError(b, err)
		if _, err := io.Copy(io.Discard, r); err != nil {
			require.FailNow(b, fmt.Sprint(err))
		}
		r.Close()
		if st, err := p.Wait(ctx); err != nil || !st.Success() {
			require.FailNow(b, fmt.Sprintf("Wait = %v, %v", st, err))
		}
		ref, _ := p.Ref()
		var rd struct {
			Dir string `json:"dir"`
		}
		_ = json.Unmarshal(ref.Data, &rd)
		if _, err := os.Stat(rd.Dir + "/armed"); err == nil {
			armed++
		}
		require.NoError(b, p.Remove(ctx))
	}
	b.ReportMetric(float64(tr.Execs()-execs)/float64(b.N), "execs/op")
	b.ReportMetric(100*float64(armed)/float64(b.N), "armed-%")
}
