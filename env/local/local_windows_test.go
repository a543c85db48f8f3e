package local

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/windows"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/testing/winsh"
)

// The Windows subset of the conformance suite (envtest needs sh, setsid
// and /proc). Every process runs this test binary as sh.exe (see
// winShell). What is alive is read from a toolhelp snapshot and checked
// against the PIDs the members wrote themselves, never asked of the code
// under test. Under Wine: make wine-test, or
// CORRAL_WINE_RUN=^TestWindows scripts/wine/run-windows-tests.sh ./env/local.

// treeWait bounds how long a killed tree may take to be gone (and a tree
// to start): Wine starts and ends processes slowly (under a second here
// for the deepest tree), Windows in milliseconds. A failing run takes this
// long per case, so it is not larger than needed.
const treeWait = 5 * time.Second

// winEnv puts a copy of the test binary named sh.exe first on PATH and
// returns an Env closed after the test, plus a directory for PID reports.
// Every reported process still alive at the end is terminated, so even a
// failed test leaves nothing running.
func winEnv(t *testing.T) (*Env, string) {
	t.Helper()
	dir := testTempDir(t)
	self, err := os.Executable()
	require.NoError(t, err)
	bin, err := os.ReadFile(self)
	require.NoError(t, err)
	shDir := filepath.Join(dir, "bin")
	require.NoError(t, os.Mkdir(shDir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(shDir, "sh.exe"), bin, 0o700))
	t.Setenv("PATH", shDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	pids := filepath.Join(dir, "pids")
	require.NoError(t, os.Mkdir(pids, 0o700))
	errs := filepath.Join(dir, "errors")
	require.NoError(t, os.Mkdir(errs, 0o700))
	t.Setenv(winErrDirVar, errs)
	t.Cleanup(func() {
		if msgs := shellErrors(t, errs); len(msgs) > 0 {
			t.Errorf("the shell failed: %q", msgs)
		}
	})
	// Nothing here is worth a warning: "tree setup after start failed"
	// was logged for every leader that exited before its assignment.
	warnings := &warnRecorder{}
	t.Cleanup(func() {
		if msgs := warnings.messages(); len(msgs) > 0 {
			t.Errorf("the Env logged warnings: %q", msgs)
		}
	})
	e, err := New(Options{StateDir: filepath.Join(dir, "state"), Logger: slog.New(warnings)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	// Cleanups run last first: survivors are ended before Close, which
	// would otherwise wait 10 s for them in a failing run.
	t.Cleanup(func() { terminateReported(t, pids) })
	return e, pids
}

// shellErrors is what the shell stand-ins wrote to dir on failing.
func shellErrors(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.err"))
	require.NoError(t, err)
	var msgs []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		msgs = append(msgs, strings.TrimSpace(string(b)))
	}
	return msgs
}

// warnRecorder is a slog.Handler that keeps the warnings and errors.
type warnRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (h *warnRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *warnRecorder) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *warnRecorder) WithGroup(string) slog.Handler                { return h }

func (h *warnRecorder) Handle(_ context.Context, r slog.Record) error {
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool { msg += " " + a.String(); return true })
	h.mu.Lock()
	h.msgs = append(h.msgs, msg)
	h.mu.Unlock()
	return nil
}

func (h *warnRecorder) messages() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.msgs)
}

// snapshotEntries is a toolhelp snapshot of every live process by PID.
func snapshotEntries(t *testing.T) map[int]windows.ProcessEntry32 {
	t.Helper()
	snap, err := windows.CreateToolhelp32Snapshot(windows.TH32CS_SNAPPROCESS, 0)
	require.NoError(t, err)
	defer windows.CloseHandle(snap)
	procs := map[int]windows.ProcessEntry32{}
	entry := windows.ProcessEntry32{Size: uint32(unsafe.Sizeof(windows.ProcessEntry32{}))}
	for err = windows.Process32First(snap, &entry); err == nil; err = windows.Process32Next(snap, &entry) {
		procs[int(entry.ProcessID)] = entry
	}
	require.ErrorIs(t, err, windows.ERROR_NO_MORE_FILES)
	return procs
}

// snapshot maps the PID of every live process to its executable's name.
func snapshot(t *testing.T) map[int]string {
	t.Helper()
	procs := map[int]string{}
	for pid, p := range snapshotEntries(t) {
		procs[pid] = windows.UTF16ToString(p.ExeFile[:])
	}
	return procs
}

// alive is those of pids that a snapshot shows running as sh.exe (a PID
// reused by another program does not count).
func alive(t *testing.T, pids []int) []int {
	t.Helper()
	procs := snapshot(t)
	var live []int
	for _, pid := range pids {
		if strings.EqualFold(procs[pid], "sh.exe") {
			live = append(live, pid)
		}
	}
	return live
}

// reported lists the PIDs written to dir and its subdirectories so far.
func reported(t *testing.T, dir string) []int {
	t.Helper()
	var pids []int
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if pid, err := strconv.Atoi(d.Name()); err == nil && !d.IsDir() {
			pids = append(pids, pid)
		}
		return nil
	})
	require.NoError(t, err)
	slices.Sort(pids)
	return pids
}

// awaitReported waits until n members have reported themselves.
func awaitReported(t *testing.T, dir string, n int) []int {
	t.Helper()
	deadline := time.Now().Add(treeWait)
	for {
		pids := reported(t, dir)
		if len(pids) >= n {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d tree members reported their PIDs within %s: %v", len(pids), n, treeWait, pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitGone fails unless every one of pids is gone within treeWait.
func awaitGone(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(treeWait)
	for {
		live := alive(t, pids)
		if len(live) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("tree members %v of %v still run %s after the kill", live, pids, treeWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// terminateReported ends every reported member still alive, so that a
// failed test leaves nothing behind, and fails the test if there was one.
func terminateReported(t *testing.T, dir string) {
	live := alive(t, reported(t, dir))
	for _, pid := range live {
		h, err := windows.OpenProcess(windows.PROCESS_TERMINATE, false, uint32(pid))
		if err != nil {
			continue
		}
		_ = windows.TerminateProcess(h, 1)
		_ = windows.CloseHandle(h)
	}
	if len(live) > 0 {
		t.Errorf("tree members %v were still running when the test ended", live)
	}
}

func winStart(t *testing.T, e *Env, spec env.Spec) env.Process {
	t.Helper()
	var p env.Process
	err := winsh.RetryCreateGlitch(func() error {
		var err error
		p, err = e.Start(context.Background(), spec)
		return err
	})
	require.NoError(t, err)
	return p
}

func winWait(t *testing.T, p env.Process) env.ExitStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), treeWait)
	defer cancel()
	st, err := p.Wait(ctx)
	require.NoError(t, err)
	return st
}

func readAll(t *testing.T, p env.Process) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), treeWait)
	defer cancel()
	r, err := p.Output(ctx, 0)
	require.NoError(t, err)
	defer r.Close()
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	return b
}

func TestWindowsExitCodes(t *testing.T) {
	e, _ := winEnv(t)
	for _, code := range []int{0, 1, 3, 124, 137, 255} {
		p := winStart(t, e, env.Spec{Command: "echo x; exit " + strconv.Itoa(code)})
		// 137 and 1 are plain exits: only a tree corral ended reads as killed.
		assert.Equal(t, env.Exited(code), winWait(t, p), "exit %d", code)
	}
}

func TestWindowsOutput(t *testing.T) {
	e, _ := winEnv(t)
	p := winStart(t, e, env.Spec{Command: "echo hello; echoerr world; echo again"})
	assert.Equal(t, "hello\nworld\nagain\n", string(readAll(t, p)))
	assert.Equal(t, env.Exited(0), winWait(t, p))
}

func TestWindowsOutputLargeBinary(t *testing.T) {
	e, _ := winEnv(t)
	const n = 3 << 20
	p := winStart(t, e, env.Spec{Command: "big " + strconv.Itoa(n)})
	got := readAll(t, p)
	require.Len(t, got, n)
	require.True(t, bytes.Equal(bigPattern(n), got), "the output differs from what was written")
	assert.Equal(t, env.Exited(0), winWait(t, p))
}

func TestWindowsStdin(t *testing.T) {
	e, _ := winEnv(t)
	p := winStart(t, e, env.Spec{Command: "cat; exit 5", Stdin: true})
	in := bigPattern(256 << 10)
	done := make(chan []byte)
	go func() { done <- readAll(t, p) }()
	ctx, cancel := context.WithTimeout(context.Background(), treeWait)
	defer cancel()
	n, err := p.Write(ctx, in)
	require.NoError(t, err)
	require.Equal(t, len(in), n)
	require.NoError(t, p.CloseStdin(ctx))
	assert.True(t, bytes.Equal(in, <-done), "cat did not give back its input")
	assert.Equal(t, env.Exited(5), winWait(t, p))
}

// TestWindowsTimeout: Wait gives up at the caller's deadline, and the
// kill that follows reads as "killed by", not as the job's exit code.
func TestWindowsTimeout(t *testing.T) {
	e, pids := winEnv(t)
	for _, sig := range []env.Signal{env.SIGKILL, env.SIGTERM} {
		p := winStart(t, e, env.Spec{Command: "tree 2 " + pids})
		members := awaitReported(t, pids, len(reported(t, pids))+2)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_, err := p.Wait(ctx)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NoError(t, p.Signal(context.Background(), sig))
		st := winWait(t, p)
		assert.Equal(t, env.Signaled(sig), st)
		assert.Equal(t, "killed by "+sig.String(), st.String())
		awaitGone(t, members)
	}
}

// TestWindowsTreeKill kills trees of every shape with Signal and checks
// with a snapshot that no member the tree reported survives.
func TestWindowsTreeKill(t *testing.T) {
	cases := []struct {
		name    string
		command string // %[1]s: the PID directory
		members int
		// leaderExits: the leader is gone before the kill; Signal says
		// ErrExited but still ends the rest.
		leaderExits bool
	}{
		{name: "deep", command: "tree 8 %[1]s", members: 8},
		// The middle member exits at once: its child is an orphan.
		{name: "orphaned", command: "pid %[1]s; spawn orphan 2 %[1]s; sleep 5m", members: 4},
		{name: "detached", command: "detached 2 %[1]s", members: 3},
		// Descendants outlive the leader and hold the output open.
		{name: "leader-exited", command: "orphan 3 %[1]s", members: 4, leaderExits: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, dir := winEnv(t)
			p := winStart(t, e, env.Spec{Command: strings.ReplaceAll(tc.command, "%[1]s", dir)})
			members := awaitReported(t, dir, tc.members)
			if tc.leaderExits {
				assert.Equal(t, env.Exited(0), winWait(t, p))
			}
			require.NotEmpty(t, alive(t, members), "no member runs before the kill")
			err := p.Signal(context.Background(), env.SIGKILL)
			if tc.leaderExits {
				require.ErrorIs(t, err, env.ErrExited)
			} else {
				require.NoError(t, err)
				assert.Equal(t, env.Signaled(env.SIGKILL), winWait(t, p))
			}
			awaitGone(t, members)
		})
	}
}

// TestWindowsBreakaway: a member asking to leave the job
// (CREATE_BREAKAWAY_FROM_JOB) is refused, or if it is let out, the kill
// must reach it anyway.
func TestWindowsBreakaway(t *testing.T) {
	e, dir := winEnv(t)
	p := winStart(t, e, env.Spec{Command: "breakaway " + dir})
	r, err := p.Output(context.Background(), 0)
	require.NoError(t, err)
	defer r.Close()
	line, err := bufio.NewReader(r).ReadString('\n')
	require.NoError(t, err)
	t.Logf("the member says: %s", strings.TrimSpace(line))
	n := 1
	if strings.HasPrefix(line, "breakaway started") {
		n = 2
	}
	members := awaitReported(t, dir, n)
	require.NoError(t, p.Signal(context.Background(), env.SIGKILL))
	assert.Equal(t, env.Signaled(env.SIGKILL), winWait(t, p))
	awaitGone(t, members)
}

// TestWindowsInJobFromStart: the leader is in its job before its first
// instruction (created suspended, assigned, resumed), so nothing it
// creates at once can start outside.
func TestWindowsInJobFromStart(t *testing.T) {
	if in, err := isProcessInJob(windows.CurrentProcess(), 0); err != nil || in {
		t.Skipf("the test already runs in a job (%v, %v): every child would be in one", in, err)
	}
	e, _ := winEnv(t)
	for range 3 {
		p := winStart(t, e, env.Spec{Command: "injob"})
		assert.Equal(t, "injob true\n", string(readAll(t, p)))
		assert.Equal(t, env.Exited(0), winWait(t, p))
	}
}

func TestWindowsSurvivors(t *testing.T) {
	e, dir := winEnv(t)
	p := winStart(t, e, env.Spec{Command: "orphan 2 " + dir})
	members := awaitReported(t, dir, 3)
	assert.Equal(t, env.Exited(0), winWait(t, p))
	// The leader has exited; its two descendants are what survives.
	survivors, err := p.Survivors(context.Background())
	require.NoError(t, err)
	for _, pid := range alive(t, members) {
		assert.Contains(t, survivors, pid, "a live member is missing from Survivors %v", survivors)
	}
	require.ErrorIs(t, p.Signal(context.Background(), env.SIGKILL), env.ErrExited)
	awaitGone(t, members)
	deadline := time.Now().Add(treeWait)
	for {
		survivors, err = p.Survivors(context.Background())
		require.NoError(t, err)
		if len(survivors) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	assert.Empty(t, survivors, "Survivors after the tree is gone")
	require.NoError(t, p.Release())
	_, err = p.Survivors(context.Background())
	require.ErrorIs(t, err, env.ErrReleased)
}

// TestWindowsClose: Close ends every tree: one whose leader runs, one whose
// leader exited while descendants hold the output, and one of those that
// was released first (the release closes the job while Close may still
// look at it; it used to wait 10 s and fail with "Invalid handle").
func TestWindowsClose(t *testing.T) {
	for i := range 3 {
		e, dir := winEnv(t)
		a := filepath.Join(dir, "a")
		require.NoError(t, os.Mkdir(a, 0o700))
		winStart(t, e, env.Spec{Command: "tree 3 " + a})
		b := filepath.Join(dir, "b")
		require.NoError(t, os.Mkdir(b, 0o700))
		pb := winStart(t, e, env.Spec{Command: "orphan 2 " + b})
		c := filepath.Join(dir, "c")
		require.NoError(t, os.Mkdir(c, 0o700))
		pc := winStart(t, e, env.Spec{Command: "orphan 2 " + c})
		members := slices.Concat(awaitReported(t, a, 3), awaitReported(t, b, 3), awaitReported(t, c, 3))
		winWait(t, pb)
		winWait(t, pc)
		require.NoError(t, pc.Release())
		start := time.Now()
		require.NoError(t, e.Close(), "round %d", i)
		took := time.Since(start)
		assert.Less(t, took, 5*time.Second, "Close took %s", took)
		t.Logf("round %d: Close took %s", i, took.Round(time.Millisecond))
		// Close returned: the trees it waited for must be gone already,
		// not soon (the released one's job was closed by its release).
		assert.Empty(t, alive(t, members[:6]), "Close returned while members run")
		awaitGone(t, members)
		_, err := e.Start(context.Background(), env.Spec{Command: "exit 0"})
		require.ErrorIs(t, err, env.ErrReleased)
	}
}

// TestWindowsControlLeaderOnly shows that the checks above can fail:
// terminating only the leader, as a plain TerminateProcess does, leaves
// its descendants running.
func TestWindowsControlLeaderOnly(t *testing.T) {
	e, dir := winEnv(t)
	p := winStart(t, e, env.Spec{Command: "tree 3 " + dir})
	members := awaitReported(t, dir, 3)
	h, err := windows.OpenProcess(windows.PROCESS_TERMINATE, false, uint32(p.PID()))
	require.NoError(t, err)
	require.NoError(t, windows.TerminateProcess(h, 1))
	_ = windows.CloseHandle(h)
	assert.Equal(t, env.Exited(1), winWait(t, p), "a leader corral did not end reads as its exit code")
	time.Sleep(300 * time.Millisecond)
	rest := slices.DeleteFunc(slices.Clone(members), func(pid int) bool { return pid == p.PID() })
	assert.ElementsMatch(t, rest, alive(t, rest), "the descendants should outlive a leader-only kill")
	require.NoError(t, e.Close())
	awaitGone(t, members)
}

// supervisor starts the test binary as a supervisor of its own running
// command, and returns it with its stdin and its stdout's lines.
func supervisor(t *testing.T, command, outerJob string) (*exec.Cmd, io.WriteCloser, <-chan string) {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), winSupervisorVar+"="+command, winOuterJobVar+"="+outerJob)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	// The lines come through a goroutine so that a supervisor that hangs
	// fails the test instead of hanging it; it ends when the supervisor
	// does (killed at the latest by the cleanup).
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		for range lines {
		}
		_ = cmd.Wait()
	})
	first := nextLine(t, lines)
	require.True(t, strings.HasPrefix(first, "started "), "the supervisor said %q", first)
	return cmd, in, lines
}

// nextLine is the supervisor's next line; it fails the test after
// 2*treeWait (the supervisor's own waits are bounded by treeWait).
func nextLine(t *testing.T, lines <-chan string) string {
	t.Helper()
	select {
	case line, ok := <-lines:
		require.True(t, ok, "the supervisor ended without a word")
		return line
	case <-time.After(2 * treeWait):
		t.Fatalf("the supervisor said nothing for %s", 2*treeWait)
		return ""
	}
}

// TestWindowsSupervisorKilled: a supervisor that dies without Close
// (TerminateProcess, a crash) takes its trees with it: the system closes
// its job handles, and the jobs are KILL_ON_JOB_CLOSE.
func TestWindowsSupervisorKilled(t *testing.T) {
	_, dir := winEnv(t)
	cmd, _, _ := supervisor(t, "tree 4 "+dir, "")
	members := awaitReported(t, dir, 4)
	require.Len(t, alive(t, members), 4)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	awaitGone(t, members)
}

// TestWindowsOuterJob: a supervisor that itself runs in a job (a CI
// runner, an IDE, an agent's session) still makes and kills its trees:
// nested in a plain job, and outside one that lets children break away
// silently.
func TestWindowsOuterJob(t *testing.T) {
	for _, kind := range []string{"nested", "silent"} {
		t.Run(kind, func(t *testing.T) {
			_, dir := winEnv(t)
			_, in, lines := supervisor(t, "pid "+dir+"; spawn orphan 2 "+dir+"; sleep 5m", kind)
			members := awaitReported(t, dir, 4)
			_, err := io.WriteString(in, "kill\n")
			require.NoError(t, err)
			assert.Equal(t, "status killed by SIGKILL", nextLine(t, lines))
			awaitGone(t, members)
			_, err = io.WriteString(in, "close\n")
			require.NoError(t, err)
			assert.Equal(t, "closed ok", nextLine(t, lines))
			require.NoError(t, in.Close())
		})
	}
}

// TestWindowsReleasedTree: after release every method of the tree is a
// no-op: the job handle is gone, not reused.
func TestWindowsReleasedTree(t *testing.T) {
	s, err := newSystem(false, nil)
	require.NoError(t, err)
	tr, err := s.newTree("x")
	require.NoError(t, err)
	tr.release()
	tr.release()
	pids, err := tr.survivors(true)
	require.NoError(t, err)
	assert.Empty(t, pids)
	require.NoError(t, tr.signal(9, true))
	require.Error(t, tr.signal(10, true))
	require.Error(t, tr.started(&os.Process{Pid: os.Getpid()}))
}

// TestWindowsAssignFailureFailsStart: a leader that cannot be put in its
// job never runs (it is still suspended): the start fails, and the leader
// is ended instead of running outside the job.
func TestWindowsAssignFailureFailsStart(t *testing.T) {
	e, _ := winEnv(t)
	assignProcessToJob = func(windows.Handle, windows.Handle) error { return windows.ERROR_ACCESS_DENIED }
	t.Cleanup(func() { assignProcessToJob = windows.AssignProcessToJobObject })
	p, err := e.Start(context.Background(), env.Spec{Command: "sleep 5m"})
	if err == nil {
		// Started after all: end it by its PID, as its job may not hold it.
		if h, err := windows.OpenProcess(windows.PROCESS_TERMINATE, false, uint32(p.PID())); err == nil {
			_ = windows.TerminateProcess(h, 1)
			_ = windows.CloseHandle(h)
		}
	}
	require.ErrorIs(t, err, windows.ERROR_ACCESS_DENIED)
	require.ErrorContains(t, err, "assign")
	deadline := time.Now().Add(treeWait)
	for {
		var children []int
		procs := snapshotEntries(t)
		for pid, p := range procs {
			if int(p.ParentProcessID) == os.Getpid() && strings.EqualFold(windows.UTF16ToString(p.ExeFile[:]), "sh.exe") {
				children = append(children, pid)
			}
		}
		if len(children) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, pid := range children {
				if h, err := windows.OpenProcess(windows.PROCESS_TERMINATE, false, uint32(pid)); err == nil {
					_ = windows.TerminateProcess(h, 1)
					_ = windows.CloseHandle(h)
				}
			}
			t.Fatalf("the leader of the failed start still ran (now ended): %v", children)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWindowsNoShellSaysWhatToDo: Windows has no sh of its own; a start
// without one on PATH says to install one, not only that a file is
// missing.
func TestWindowsNoShellSaysWhatToDo(t *testing.T) {
	dir := testTempDir(t)
	t.Setenv("PATH", dir)
	e, err := New(Options{StateDir: filepath.Join(dir, "state")})
	require.NoError(t, err)
	defer e.Close()
	_, err = e.Start(context.Background(), env.Spec{Command: "exit 0"})
	require.ErrorIs(t, err, exec.ErrNotFound)
	assert.Contains(t, err.Error(), "install Git for Windows")
}
