package nohup_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup/nohuptest"
)

var ptySize = &env.WindowSize{Rows: 24, Cols: 80}

// forPTYShells runs f on the shells whose sandbox has util-linux script:
// all but busybox ash, whose PATH holds busybox applets only.
func forPTYShells(t *testing.T, f func(t *testing.T, sh nohuptest.Shell)) {
	forShells(t, func(t *testing.T, sh nohuptest.Shell) {
		if sh.Name == "busybox-ash" {
			t.Skip("no util-linux script in the busybox PATH (TestPTYMissing)")
		}
		f(t, sh)
	})
}

// TestPTYMissing: in a sandbox without util-linux script (busybox applets
// only in PATH, no python3 either) Start with a PTY fails with an error
// that matches ErrUnsupported and names what is missing, nothing starts,
// and from then on Capabilities says there is no PTY. Pipes still work.
func TestPTYMissing(t *testing.T) {
	var bb *nohuptest.Shell
	for _, sh := range nohuptest.Shells(t) {
		if sh.Name == "busybox-ash" {
			bb = &sh
		}
	}
	if bb == nil {
		t.Skip("busybox not available (apt-get install busybox-static)")
	}
	e, _ := newEnv(t, *bb)
	require.True(t, e.Capabilities().PTY, "before the probe the engine cannot know")
	for range 2 { // the second Start uses the cached probe
		p, err := e.Start(testCtx(t), env.Spec{Command: "exit 0", PTY: ptySize})
		require.Error(t, err)
		assert.Nil(t, p)
		assert.True(t, errors.Is(err, env.ErrUnsupported), "%v does not match ErrUnsupported", err)
		assert.Contains(t, err.Error(), "util-linux script")
		assert.Contains(t, err.Error(), "no script in PATH")
	}
	caps := e.Capabilities()
	assert.False(t, caps.PTY)
	assert.False(t, caps.Resize)
	assert.False(t, caps.ReattachPTY)
	p := start(t, e, env.Spec{Command: "echo piped"})
	assert.Equal(t, "piped\n", string(readAll(t, p, 0)))
}

// TestPTYEnvironment: the machinery's variables do not reach the command,
// and SHELL (which script is handed) is the command's own again.
func TestPTYEnvironment(t *testing.T) {
	forPTYShells(t, func(t *testing.T, sh nohuptest.Shell) {
		e, _ := newEnv(t, sh)
		p := start(t, e, env.Spec{Command: `env | grep -c '^CORRAL_PTY'; echo "shell=${SHELL-unset} x=$X"`, PTY: ptySize,
			Env: []string{"SHELL=/no/such/shell", "X=a b'c"}})
		out := string(readAll(t, p, 0))
		assert.Equal(t, "0\r\nshell=/no/such/shell x=a b'c\r\n", out)
	})
}

// TestPTYCloseStdin: CloseStdin types the terminal's EOF, which ends a
// reader in canonical mode.
func TestPTYCloseStdin(t *testing.T) {
	forPTYShells(t, func(t *testing.T, sh nohuptest.Shell) {
		e, _ := newEnv(t, sh)
		p := start(t, e, env.Spec{Command: `cat; echo cat-done`, PTY: ptySize, Stdin: true})
		_, err := p.Write(testCtx(t), []byte("typed\n"))
		require.NoError(t, err)
		require.NoError(t, p.CloseStdin(testCtx(t)))
		st, err := p.Wait(testCtx(t))
		require.NoError(t, err)
		assert.Equal(t, env.Exited(0), st)
		out := readAll(t, p, 0)
		// The terminal echoes the line, cat prints it again.
		assert.Equal(t, 3, bytes.Count(out, []byte("typed\r\n"))+bytes.Count(out, []byte("cat-done\r\n")), "%q", out)
	})
}

// TestPTYWriteWithoutStdin: the terminal is stdin, but without Spec.Stdin
// nothing may be typed into it.
func TestPTYWriteWithoutStdin(t *testing.T) {
	forPTYShells(t, func(t *testing.T, sh nohuptest.Shell) {
		e, _ := newEnv(t, sh)
		p := start(t, e, env.Spec{Command: `test -t 0 && echo stdin-is-a-tty; sleep 30`, PTY: ptySize})
		_, err := p.Write(testCtx(t), []byte("x\n"))
		assert.True(t, errors.Is(err, env.ErrStdinClosed), "Write = %v, want ErrStdinClosed", err)
		r, err := p.Output(testCtx(t), 0)
		require.NoError(t, err)
		defer r.Close()
		var got []byte
		buf := make([]byte, 256)
		for !bytes.Contains(got, []byte("stdin-is-a-tty\r\n")) {
			n, err := r.Read(buf)
			require.NoError(t, err, "output so far %q", got)
			got = append(got, buf[:n]...)
		}
	})
}

// TestPTYResizeErrors: a bad size is a SpecError, a resize after the end
// ErrExited, and pipes have nothing to resize.
func TestPTYResizeErrors(t *testing.T) {
	forPTYShells(t, func(t *testing.T, sh nohuptest.Shell) {
		e, _ := newEnv(t, sh)
		p := start(t, e, env.Spec{Command: "exit 5", PTY: ptySize})
		var se *env.SpecError
		assert.True(t, errors.As(p.Resize(testCtx(t), env.WindowSize{Rows: 0, Cols: 10}), &se), "a zero size is a SpecError")
		st, err := p.Wait(testCtx(t))
		require.NoError(t, err)
		assert.Equal(t, env.Exited(5), st)
		err = p.Resize(testCtx(t), env.WindowSize{Rows: 30, Cols: 90})
		assert.True(t, errors.Is(err, env.ErrExited), "Resize after the end = %v, want ErrExited", err)

		piped := start(t, e, env.Spec{Command: "exit 0"})
		err = piped.Resize(testCtx(t), env.WindowSize{Rows: 30, Cols: 90})
		assert.True(t, errors.Is(err, env.ErrUnsupported), "Resize on pipes = %v, want ErrUnsupported", err)
	})
}

// TestPTYSignalStatus records what a terminal changes about exit statuses:
// script passes a command's exit code on, and a command killed by a
// signal becomes exit code 128+N (script folds it); a KILL of the tree is
// reported as such, since it ends script itself.
func TestPTYSignalStatus(t *testing.T) {
	forPTYShells(t, func(t *testing.T, sh nohuptest.Shell) {
		e, _ := newEnv(t, sh)
		for _, c := range []struct {
			cmd  string
			want env.ExitStatus
		}{
			{"exit 0", env.Exited(0)},
			{"exit 143", env.Exited(143)},
			{"kill -TERM $$", env.Exited(143)},
		} {
			p := start(t, e, env.Spec{Command: c.cmd, PTY: ptySize})
			st, err := p.Wait(testCtx(t))
			require.NoError(t, err)
			assert.Equal(t, c.want, st, "%q", c.cmd)
		}
		p := start(t, e, env.Spec{Command: "echo ready; sleep 30", PTY: ptySize})
		r, err := p.Output(testCtx(t), 0)
		require.NoError(t, err)
		defer r.Close()
		buf := make([]byte, 64)
		var got []byte
		for !strings.Contains(string(got), "ready") {
			n, err := r.Read(buf)
			require.NoError(t, err)
			got = append(got, buf[:n]...)
		}
		require.NoError(t, p.Signal(testCtx(t), env.SIGKILL))
		st, err := p.Wait(testCtx(t))
		require.NoError(t, err)
		assert.Equal(t, env.Signaled(env.SIGKILL), st)
	})
}
