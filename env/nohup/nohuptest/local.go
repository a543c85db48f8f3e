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

	// Resident makes OpenShell start shells, so the engine runs its calls
	// on resident shells (at most Options.Residents at once), as it does on
	// a remote transport; otherwise OpenShell refuses and every call is an
	// Exec.
	Resident bool

	outBytes  atomic.Int64
	execs     atomic.Int64
	residents atomic.Int64
}

// errNoShells is OpenShell's answer without Resident.
var errNoShells = errors.New("local transport: resident shells are off (Local.Resident)")

// OpenShell implements nohup.ShellTransport: Shell -c script as a child
// process, its stdio on pipes. Every request written to its stdin counts
// as one round trip (Execs), and what it prints as output (OutBytes).
func (l *Local) OpenShell(ctx context.Context, script string) (*nohup.Shell, error) {
	if !l.Resident {
		return nil, errNoShells
	}
	sh := l.Shell
	if sh == "" {
		sh = "/bin/sh"
	}
	cmd := exec.Command(sh, "-c", script)
	cmd.Env = l.Env
	shell, err := nohup.StartShell(cmd)
	if err != nil {
		return nil, fmt.Errorf("local transport: %w", err)
	}
	l.residents.Add(1)
	shell.Stdin = countingRequests{w: shell.Stdin, n: &l.execs}
	shell.Stdout = io.TeeReader(shell.Stdout, countingWriter{w: io.Discard, n: &l.outBytes})
	return shell, nil
}

// countingRequests counts the writes to a resident shell: one per request.
type countingRequests struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingRequests) Write(p []byte) (int, error) {
	c.n.Add(1)
	return c.w.Write(p)
}

// Residents returns how many resident shells were started so far.
func (l *Local) Residents() int64 { return l.residents.Load() }

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
	"stat", "timeout", "nc",
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
