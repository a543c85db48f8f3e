// Package nohuptest provides a Transport that runs the nohup engine's
// scripts on this machine with a chosen shell (dash, bash, busybox ash), so
// the engine and the conformance suite run against real processes without
// a container or a remote host.
package nohuptest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/env/nohup"
)

// Local is a nohup.Transport that runs each script as Shell -c script on
// this machine. It counts the bytes it copies from the scripts' stdout, so
// tests can check what would cross a real transport.
type Local struct {
	// Shell is the absolute path of the shell; empty means /bin/sh.
	Shell string
	// Env is the scripts' environment; nil means os.Environ().
	Env []string

	// Resident makes ExecLib run calls on resident shells (nohup.Resident,
	// at most 4 at once), as a remote transport does; otherwise ExecLib
	// runs lib and call through Exec. Close ends them.
	Resident bool

	outBytes  atomic.Int64
	execs     atomic.Int64
	residents atomic.Int64

	poolOnce sync.Once
	pool     *nohup.ResidentPool
}

// ExecLib implements nohup.LibTransport.
func (l *Local) ExecLib(ctx context.Context, lib, call, after string, stdout, stderr io.Writer) (int, error) {
	if !l.Resident {
		return l.Exec(ctx, lib+call, nil, stdout, stderr)
	}
	l.execs.Add(1)
	code, err := l.residentPool().Call(ctx, lib, call, after, countingWriter{w: orDiscard(stdout), n: &l.outBytes}, stderr)
	if errors.Is(err, nohup.ErrNoResident) {
		l.execs.Add(-1)
		return l.Exec(ctx, lib+call, nil, stdout, stderr)
	}
	if err != nil && ctx.Err() != nil {
		return -1, fmt.Errorf("local transport: %w", ctx.Err())
	}
	return code, err
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// newResident starts a resident shell as a child process.
func (l *Local) newResident(ctx context.Context, lib string) (*nohup.Resident, error) {
	sh := l.Shell
	if sh == "" {
		sh = "/bin/sh"
	}
	r, err := StartResident(sh, l.Env, lib)
	if err != nil {
		return nil, err
	}
	l.residents.Add(1)
	return r, nil
}

// StartResident starts nohup.ResidentScript(lib) as Shell -c on this
// machine, with environ (nil: os.Environ()), and returns its Resident;
// Close kills and reaps the shell.
func StartResident(shell string, environ []string, lib string) (*nohup.Resident, error) {
	cmd := exec.Command(shell, "-c", nohup.ResidentScript(lib))
	cmd.Env = environ
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("local transport: start resident %s: %w", shell, err)
	}
	var once sync.Once
	closeFn := func() error {
		once.Do(func() {
			stdin.Close()
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		return nil
	}
	return nohup.NewResident(lib, stdin, stdout, stderr, closeFn), nil
}

// Residents returns how many resident shells were started so far.
func (l *Local) Residents() int64 { return l.residents.Load() }

func (l *Local) residentPool() *nohup.ResidentPool {
	l.poolOnce.Do(func() { l.pool = &nohup.ResidentPool{New: l.newResident, Max: 4} })
	return l.pool
}

// Close ends the resident shells.
func (l *Local) Close() error {
	l.residentPool().Close()
	return nil
}

// Exec implements nohup.Transport.
func (l *Local) Exec(ctx context.Context, script string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	sh := l.Shell
	if sh == "" {
		sh = "/bin/sh"
	}
	cmd := exec.CommandContext(ctx, sh, "-c", script)
	cmd.Env = l.Env
	if stdin != nil {
		cmd.Stdin = stdin
	}
	cmd.Stdout = countingWriter{w: stdout, n: &l.outBytes}
	if stderr != nil {
		cmd.Stderr = stderr
	}
	// A script never leaves a process holding its pipes, but if a bug did,
	// Wait must not hang on it.
	cmd.WaitDelay = 30 * time.Second
	l.execs.Add(1)
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case ctx.Err() != nil:
		return -1, fmt.Errorf("local transport: %w", ctx.Err())
	case errors.As(err, &ee) && ee.Exited():
		return ee.ExitCode(), nil
	}
	return -1, fmt.Errorf("local transport: run %s: %w", sh, err)
}

// OutBytes returns how many bytes the scripts wrote to stdout so far.
func (l *Local) OutBytes() int64 { return l.outBytes.Load() }

// Execs returns how many scripts ran so far.
func (l *Local) Execs() int64 { return l.execs.Load() }

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// Shell names a shell to test with.
type Shell struct {
	Name string // "dash", "bash", "busybox-ash"
	Path string // absolute path usable as nohup.Options.Shell
	Env  []string
}

// busyboxApplets are the utilities the engine's scripts and the
// conformance suite use; the busybox variant puts only busybox versions of
// them first in PATH.
var busyboxApplets = []string{
	"ash", "sh", "sleep", "setsid", "nohup", "env", "mkfifo", "tail", "head", "wc", "grep", "find",
	"sort", "cat", "mv", "rm", "mkdir", "id", "chmod", "yes", "tr", "mktemp", "kill", "ps", "stty", "true",
	"false", "echo", "printf", "dd", "ls", "seq", "pwd", "test", "xargs", "uname", "date", "od", "sed", "awk",
}

// Shells returns the shells available on this machine: /bin/sh, bash and
// busybox ash (with a PATH of busybox applets in a directory under
// t.TempDir()). Missing ones are skipped with t.Log.
func Shells(t testing.TB) []Shell {
	t.Helper()
	var out []Shell
	out = append(out, Shell{Name: "sh", Path: "/bin/sh", Env: os.Environ()})
	if p, err := exec.LookPath("bash"); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			out = append(out, Shell{Name: "bash", Path: abs, Env: os.Environ()})
		}
	} else {
		t.Log("nohuptest: bash not found, skipping it")
	}
	if bb, err := exec.LookPath("busybox"); err == nil {
		dir := filepath.Join(t.TempDir(), "busybox-bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		list, err := exec.Command(bb, "--list").Output()
		if err != nil {
			t.Fatalf("nohuptest: busybox --list: %v", err)
		}
		have := map[string]bool{}
		for _, a := range strings.Fields(string(list)) {
			have[a] = true
		}
		for _, a := range busyboxApplets {
			target := bb
			if !have[a] {
				// Debian's busybox lacks some applets (nohup); borrow the
				// host's tool so the suite still runs, and say so.
				host, err := exec.LookPath(a)
				if err != nil {
					t.Logf("nohuptest: %s is neither a busybox applet nor on PATH", a)
					continue
				}
				t.Logf("nohuptest: busybox has no %s applet, using %s", a, host)
				target = host
			}
			if err := os.Symlink(target, filepath.Join(dir, a)); err != nil {
				t.Fatal(err)
			}
		}
		env := []string{"PATH=" + dir, "HOME=/tmp", "LANG=C"}
		out = append(out, Shell{Name: "busybox-ash", Path: filepath.Join(dir, "ash"), Env: env})
	} else {
		t.Log("nohuptest: busybox not found (apt-get install busybox-static), skipping busybox ash")
	}
	return out
}
