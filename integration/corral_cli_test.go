package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// buildCorral returns the path of cmd/corral (with cmd/corrald beside it) built for this package: once
// (linking takes seconds on two cores), into the package's directory
// (TestMain), where it outlives every test, as the shared daemon it
// starts must.
func buildCorral(t testing.TB) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("corral run end-to-end tests need a POSIX shell")
	}
	corralBin.once.Do(func() {
		// corral and corrald, side by side as make build and go install
		// leave them: corral hands serve, --no-daemon, mcp and acp over.
		bin := filepath.Join(packageDir, "corral")
		cmd := exec.Command("go", "build", "-o", packageDir+string(filepath.Separator), "github.com/corralhq/corral/cmd/corral", "github.com/corralhq/corral/cmd/corrald")
		if out, err := cmd.CombinedOutput(); err != nil {
			corralBin.err = fmt.Errorf("go build cmd/corral cmd/corrald: %v\n%s", err, out)
			return
		}
		// Start the package's shared daemon now, so that no test's corral
		// run is the one that starts it (and says so on stderr).
		if out, err := exec.Command(bin, "ps").CombinedOutput(); err != nil {
			corralBin.err = fmt.Errorf("corral ps, to start the shared daemon: %v\n%s", err, out)
			return
		}
		corralBin.path = bin
	})
	if corralBin.err != nil {
		require.FailNow(t, fmt.Sprint(corralBin.err))
	}
	return corralBin.path
}

var corralBin struct {
	once sync.Once
	path string
	err  error
}

// cliResult is what one corral invocation did.
type cliResult struct {
	code   int
	stdout string
	stderr string
}

// runCorral runs the binary to completion with stdin (nil: /dev/null) and
// returns its exit code and output. The generous deadline only guards
// against a hang; no test asserts on durations.
func runCorral(t *testing.T, bin string, stdin io.Reader, args ...string) cliResult {
	t.Helper()
	return runCorralEnv(t, bin, nil, stdin, args...)
}

// runCorralEnv is runCorral with the environment environ (nil: this
// process's).
func runCorralEnv(t *testing.T, bin string, environ []string, stdin io.Reader, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = environ
	var out, errOut bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	require.Truef(t, err == nil || errors.As(err, &ee), "corral %q: %v", args, err)
	if ctx.Err() != nil {
		require.FailNow(t, fmt.Sprintf("corral %q did not finish within 2 minutes; stderr %q", args, errOut.String()))
	}
	return cliResult{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errOut.String()}
}

// cliSleepMarker returns a unique sleep duration such as "517.0413": a
// `sleep` with it is recognisable in the process table as ours, so the
// test never confuses (or touches) processes other tests started.
func cliSleepMarker(t *testing.T) string {
	t.Helper()
	m := fmt.Sprintf("%d.%04d", 300+rand.IntN(600), rand.IntN(10000))
	t.Cleanup(func() {
		// Leave nothing behind even when an assertion failed first.
		for _, pid := range cliMarkerPIDs(t, m) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return m
}

// cliMarkerPIDs lists live processes whose command line is `sleep MARKER`.
func cliMarkerPIDs(t *testing.T, marker string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err, "scan /proc")
	want := "sleep\x00" + marker + "\x00"
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // exited meanwhile
		}
		if strings.HasSuffix(string(cmdline), want) && filepath.Base(strings.SplitN(string(cmdline), "\x00", 2)[0]) == "sleep" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// cliRequireMarkerGone fails unless no `sleep MARKER` process is left. A
// SIGKILLed process can take a moment to leave the process table, so it
// waits for the condition with a generous deadline instead of asserting
// once.
func cliRequireMarkerGone(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := cliMarkerPIDs(t, marker)
		if len(pids) == 0 {
			return
		}
		require.Falsef(t, time.Now().After(deadline), "processes of the tree survived: `sleep %s` still running as PIDs %v", marker, pids)
		time.Sleep(50 * time.Millisecond)
	}
}

// cliRequireMarkerRunning waits until at least n `sleep MARKER` processes run,
// so a kill test proves the tree existed before it was killed.
func cliRequireMarkerRunning(t *testing.T, marker string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(cliMarkerPIDs(t, marker)) < n {
		if time.Now().After(deadline) {
			require.FailNow(t, fmt.Sprintf("expected %d `sleep %s` processes, found %v", n, marker, cliMarkerPIDs(t, marker)))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func cliRequireOneLine(t *testing.T, stderr string, wants ...string) {
	t.Helper()
	assert.Truef(t, strings.Count(stderr, "\n") == 1 && strings.HasSuffix(stderr, "\n"), "stderr is not exactly one line: %q", stderr)
	for _, w := range wants {
		assert.Truef(t, strings.Contains(stderr, w), "stderr %q lacks %q", stderr, w)
	}
}

func TestCorralRun(t *testing.T) {
	bin := buildCorral(t)

	t.Run("exit code and output", func(t *testing.T) {
		t.Parallel()
		r := runCorral(t, bin, nil, "run", "--", "sh", "-c", "echo hi; exit 3")
		require.Truef(t, r.code == 3 && r.stdout == "hi\n" && r.stderr == "", "got exit %d stdout %q stderr %q, want 3 %q %q", r.code, r.stdout, r.stderr, "hi\n", "")
	})

	t.Run("one word is a shell command line", func(t *testing.T) {
		t.Parallel()
		r := runCorral(t, bin, nil, "run", "--", "echo a | tr a b; echo err >&2; exit 4")
		require.Truef(t, r.code == 4 && r.stdout == "b\nerr\n", "got exit %d stdout %q stderr %q, want 4 and b, err merged", r.code, r.stdout, r.stderr)
	})

	t.Run("words without -- keep their flags", func(t *testing.T) {
		t.Parallel()
		r := runCorral(t, bin, nil, "run", "printf", "%s-%s", "-n", "x y")
		require.Truef(t, r.code == 0 && r.stdout == "-n-x y", "got exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	})

	t.Run("success exits 0", func(t *testing.T) {
		t.Parallel()
		r := runCorral(t, bin, nil, "run", "--", "true")
		require.Truef(t, r.code == 0 && r.stdout == "" && r.stderr == "", "got %+v", r)
	})

	t.Run("timeout kills the whole tree and exits 124", func(t *testing.T) {
		t.Parallel()
		m := cliSleepMarker(t)
		script := fmt.Sprintf(`trap "" TERM; (setsid sleep %s &); sleep %s`, m, m)
		r := runCorral(t, bin, nil, "run", "--timeout", "1s", "--grace", "1s", "--", "sh", "-c", script)
		require.Truef(t, r.code == 124, "exit %d, want 124; stdout %q stderr %q", r.code, r.stdout, r.stderr)
		// The shell ignores TERM, so SIGKILL had to follow; the leader,
		// the sleep and the setsid escapee ended (the count depends on whether sh execs its last command).
		cliRequireOneLine(t, r.stderr, "timeout", "1s", "killed the process tree", "TERM, then SIGKILL after the grace period", "processes ended")
		assert.Falsef(t, strings.Contains(r.stderr, "idle"), "stderr names the idle timeout, but the wall-clock timeout fired: %q", r.stderr)
		cliRequireMarkerGone(t, m)
	})

	t.Run("idle timeout exits 124 and says so", func(t *testing.T) {
		t.Parallel()
		m := cliSleepMarker(t)
		r := runCorral(t, bin, nil, "run", "--idle-timeout", "1s", "--grace", "1s", "--",
			"sh", "-c", "echo started; sleep "+m)
		require.Truef(t, r.code == 124 && r.stdout == "started\n", "exit %d stdout %q stderr %q, want 124 and the output so far", r.code, r.stdout, r.stderr)
		cliRequireOneLine(t, r.stderr, "idle timeout", "1s", "killed the process tree")
		cliRequireMarkerGone(t, m)
	})

	t.Run("death by signal exits 128+N", func(t *testing.T) {
		t.Parallel()
		for sig, want := range map[string]int{"USR1": 128 + 10, "KILL": 128 + 9} {
			r := runCorral(t, bin, nil, "run", "--", "sh", "-c", "kill -"+sig+" $$")
			assert.Truef(t, r.code == want, "kill -%s: exit %d, want %d; stderr %q", sig, r.code, want, r.stderr)
		}
	})

	for _, tc := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}, {syscall.SIGHUP, 129}} {
		t.Run("interrupt "+tc.sig.String()+" kills the tree", func(t *testing.T) {
			t.Parallel()
			m := cliSleepMarker(t)
			// The command ignores INT and TERM: only the kill's SIGKILL
			// after --grace ends it.
			cmd := exec.Command(bin, "run", "--grace", "1s", "--", "sh", "-c",
				fmt.Sprintf(`trap "" INT TERM; (setsid sleep %s &); echo ready; sleep %s`, m, m))
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			var errOut bytes.Buffer
			cmd.Stderr = &errOut
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			// Output is streamed live: "ready" arrives while the command runs.
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil || line != "ready\n" {
				require.FailNow(t, fmt.Sprintf("first line %q, %v; stderr %q", line, err, errOut.String()))
			}
			cliRequireMarkerRunning(t, m, 2)
			require.NoError(t, cmd.Process.Signal(tc.sig))
			_, _ = io.Copy(io.Discard, stdout)
			err = cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != tc.code {
				require.FailNow(t, fmt.Sprintf("exit %d (%v), want %d; stderr %q", code, err, tc.code, errOut.String()))
			}
			cliRequireOneLine(t, errOut.String(), "interrupted by SIG", "killed the process tree")
			cliRequireMarkerGone(t, m)
		})
	}

	t.Run("closed stdout kills the tree and exits 141", func(t *testing.T) {
		t.Parallel()
		m := cliSleepMarker(t)
		// An escapee keeps writing; the leader sleeps with the marker.
		cmd := exec.Command(bin, "run", "--grace", "1s", "--", "sh", "-c",
			fmt.Sprintf(`(setsid sh -c 'while :; do echo tick; sleep 0.05; done' &); sleep %s`, m))
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		var errOut bytes.Buffer
		cmd.Stderr = &errOut
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || line != "tick\n" {
			require.FailNow(t, fmt.Sprintf("first line %q, %v; stderr %q", line, err, errOut.String()))
		}
		cliRequireMarkerRunning(t, m, 1)
		stdout.Close() // like `| head -1` exiting
		err = cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != 128+13 {
			require.FailNow(t, fmt.Sprintf("exit %d (%v), want 141; stderr %q", code, err, errOut.String()))
		}
		cliRequireMarkerGone(t, m)
	})

	t.Run("env and dir", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		r := runCorral(t, bin, nil, "run", "--env", "CORRAL_TEST_A=one two", "--env", "CORRAL_TEST_B=x=y",
			"--dir", dir, "--", `echo "$CORRAL_TEST_A|$CORRAL_TEST_B"; pwd -P`)
		real, err := filepath.EvalSymlinks(dir)
		require.NoError(t, err)
		want := "one two|x=y\n" + real + "\n"
		require.Truef(t, r.code == 0 && r.stdout == want, "exit %d stdout %q, want %q; stderr %q", r.code, r.stdout, want, r.stderr)
	})

	t.Run("secrets are filtered unless allowed", func(t *testing.T) {
		t.Parallel()
		show := `echo "[$CORRAL_TEST_TOKEN][$CORRAL_TEST_PLAIN]"`
		cmd := exec.Command(bin, "run", "--", show)
		cmd.Env = append(os.Environ(), "CORRAL_TEST_TOKEN=s3cret", "CORRAL_TEST_PLAIN=visible")
		out, err := cmd.Output()
		require.Truef(t, err == nil && string(out) == "[][visible]\n", "default: %q, %v; want the token filtered out", out, err)
		cmd = exec.Command(bin, "run", "--allow-env", "CORRAL_TEST_TOKEN", "--", show)
		cmd.Env = append(os.Environ(), "CORRAL_TEST_TOKEN=s3cret", "CORRAL_TEST_PLAIN=visible")
		out, err = cmd.Output()
		require.Truef(t, err == nil && string(out) == "[s3cret][visible]\n", "--allow-env: %q, %v; want the token passed on", out, err)
	})

	t.Run("missing dir fails to start with 125", func(t *testing.T) {
		t.Parallel()
		r := runCorral(t, bin, nil, "run", "--dir", filepath.Join(t.TempDir(), "nope"), "--", "true")
		require.Truef(t, r.code == 125, "exit %d, want 125; stderr %q", r.code, r.stderr)
		cliRequireOneLine(t, r.stderr, "nope")
	})

	t.Run("unreachable ssh host exits 125", func(t *testing.T) {
		t.Parallel()
		// Port 1 on loopback: nothing listens, the connection is refused.
		r := runCorral(t, bin, nil, "run", "--backend", "ssh://corral@127.0.0.1:1", "--", "true")
		require.Truef(t, r.code == 125, "exit %d stderr %q, want 125", r.code, r.stderr)
		cliRequireOneLine(t, r.stderr, "ssh://corral@127.0.0.1:1")
	})

	t.Run("stdin only with --stdin", func(t *testing.T) {
		t.Parallel()
		r := runCorral(t, bin, strings.NewReader("hello\nworld\n"), "run", "--stdin", "--", "tr a-z A-Z")
		require.Truef(t, r.code == 0 && r.stdout == "HELLO\nWORLD\n", "--stdin: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
		r = runCorral(t, bin, strings.NewReader("hello\n"), "run", "--", "cat; echo done")
		require.Truef(t, r.code == 0 && r.stdout == "done\n", "without --stdin the command must read EOF: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	})

	t.Run("pty", func(t *testing.T) {
		t.Parallel()
		r := runCorral(t, bin, nil, "run", "--pty", "--", "test -t 1 && echo tty; exit 5")
		require.Truef(t, r.code == 5 && strings.TrimSpace(r.stdout) == "tty", "exit %d stdout %q stderr %q, want 5 and tty", r.code, r.stdout, r.stderr)
		r = runCorral(t, bin, nil, "run", "--", "test -t 1 || echo pipe")
		require.Truef(t, r.stdout == "pipe\n", "without --pty stdout must not be a terminal: %q", r.stdout)
	})

	t.Run("interactive pty: terminal size, raw keys, terminal restored", func(t *testing.T) {
		t.Parallel()
		cliTestInteractivePTY(t, bin)
	})

	t.Run("usage errors exit 2 with one line", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{
			{"run", "--bogus", "--", "true"},
			{"run", "--timeout", "soon", "--", "true"},
			{"run"},
			{"run", "--backend", "nowhere://x", "--", "true"},
		} {
			r := runCorral(t, bin, nil, args...)
			assert.Truef(t, r.code == 2 && r.stdout == "", "%q: exit %d stdout %q, want 2 and nothing", args, r.code, r.stdout)
			cliRequireOneLine(t, r.stderr, "corral: ")
		}
	})

	t.Run("version", func(t *testing.T) {
		t.Parallel()
		r := runCorral(t, bin, nil, "version")
		require.Truef(t, r.code == 0 && strings.HasPrefix(r.stdout, "corral ") && strings.Contains(r.stdout, "go: go1."), "got %+v", r)
	})
}

// cliTermBuffer collects a terminal's output for polling.
type cliTermBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *cliTermBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *cliTermBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// cliTestInteractivePTY runs corral on a terminal of its own, as a person
// would: `--pty --stdin` must size the command's terminal like corral's,
// switch corral's terminal to raw mode so Ctrl-C reaches the command (which
// traps it and exits 7) instead of interrupting corral (which would exit
// 130), and restore the terminal afterwards.
func cliTestInteractivePTY(t *testing.T, bin string) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal available: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	require.NoError(t, pty.Setsize(ptmx, &pty.Winsize{Rows: 41, Cols: 101}))
	cmd := exec.Command(bin, "run", "--pty", "--stdin", "--",
		`trap 'echo got-int; exit 7' INT; stty size; echo ready; while :; do sleep 1; done`)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	require.NoError(t, cmd.Start())
	var out cliTermBuffer
	copied := make(chan struct{})
	go func() { defer close(copied); _, _ = io.Copy(&out, ptmx) }()
	waitDone := make(chan struct{}) // closed once cmd.Wait returned
	go func() { _ = cmd.Wait(); close(waitDone) }()
	defer func() {
		select {
		case <-waitDone:
		default:
			_ = cmd.Process.Kill()
			<-waitDone
		}
	}()

	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "ready") {
		if time.Now().After(deadline) {
			require.FailNow(t, fmt.Sprintf("no ready on the terminal; got %q", out.String()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := ptmx.Write([]byte{3}); err != nil { // Ctrl-C
		require.FailNow(t, fmt.Sprint(err))
	}
	select {
	case <-waitDone:
	case <-time.After(time.Minute):
		require.FailNow(t, fmt.Sprintf("corral did not exit after Ctrl-C; terminal shows %q", out.String()))
	}
	// Check the terminal before closing our end of it: corral must have
	// restored what it changed.
	termios, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	require.NoError(t, err)
	assert.Truef(t, termios.Lflag&unix.ICANON != 0 && termios.Lflag&unix.ECHO != 0, "terminal left in raw mode after corral exited (lflag %#x)", termios.Lflag)
	// With every slave descriptor closed, the master yields what is still
	// buffered and then ends: all of corral's output is in out after that.
	tty.Close()
	select {
	case <-copied:
	case <-time.After(30 * time.Second):
		require.FailNow(t, fmt.Sprintf("the terminal is still held open after corral exited; it shows %q", out.String()))
	}
	code := cmd.ProcessState.ExitCode()
	got := out.String()
	assert.Truef(t, code == 7 && strings.Contains(got, "got-int"), "exit %d, terminal %q; want the command to get Ctrl-C and exit 7", code, got)
	assert.Truef(t, strings.Contains(got, "41 101"), "command's terminal is not sized like corral's (41 101): %q", got)
}
