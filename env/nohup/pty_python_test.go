package nohup_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
	"github.com/corralhq/corral/env/nohup"
	"github.com/corralhq/corral/env/nohup/nohuptest"
)

// pythonShell returns the busybox shell with python3 (and busybox's tty
// applet) added to its PATH, and no util-linux script: a sandbox where
// terminals come from python3's pty module (sh/pty.py).
func pythonShell(t *testing.T) nohuptest.Shell {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skipf("python3 not available: %v", err)
	}
	// The interpreter itself: a pyenv shim needs more than busybox.
	out, err := exec.Command(py, "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Skipf("python3: %v", err)
	}
	py = strings.TrimSpace(string(out))
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("busybox not available (apt-get install busybox-static)")
	}
	var sh *nohuptest.Shell
	for _, s := range nohuptest.Shells(t) {
		if s.Name == "busybox-ash" {
			sh = &s
		}
	}
	require.NotNil(t, sh, "busybox is there, so is its shell")
	extra := filepath.Join(t.TempDir(), "python-bin")
	require.NoError(t, os.MkdirAll(extra, 0o755))
	require.NoError(t, os.Symlink(py, filepath.Join(extra, "python3")))
	require.NoError(t, os.Symlink(bb, filepath.Join(extra, "tty")))
	out2 := nohuptest.Shell{Name: "busybox-python3", Path: sh.Path}
	for _, kv := range sh.Env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			kv = "PATH=" + v + ":" + extra
		}
		out2.Env = append(out2.Env, kv)
	}
	return out2
}

// TestConformancePythonPTY runs the suite's PTY cases where terminals come
// from python3 (no util-linux script in PATH).
func TestConformancePythonPTY(t *testing.T) {
	sh := pythonShell(t)
	skip := map[string]string{}
	for _, name := range envtest.Cases() {
		if !strings.HasPrefix(name, "PTY/") {
			skip[name] = "the python3 variant runs the PTY cases only; the rest is busybox-ash's"
		}
	}
	base := t.TempDir() + "/state"
	tr := &nohuptest.Local{Shell: sh.Path, Env: sh.Env}
	envtest.Run(t, envtest.Config{
		PTY:            true,
		Skip:           skip,
		SignalBaseline: envtest.LocalSignalBaseline,
		New: func(t *testing.T) env.Environment {
			e, err := nohup.New(tr, nohup.Options{Name: "local-python3", BaseDir: base, Shell: sh.Path})
			require.NoError(t, err)
			return e
		},
	})
}

// TestPythonPTYStatus: pty.py ends as the command did, so a command on a
// terminal killed by a signal is reported as killed (script would say
// 128+N), and the environment is the command's own.
func TestPythonPTYStatus(t *testing.T) {
	sh := pythonShell(t)
	e, _ := newEnv(t, sh)
	for _, c := range []struct {
		cmd  string
		want env.ExitStatus
	}{
		{"exit 0", env.Exited(0)},
		{"exit 143", env.Exited(143)},
		{"kill -TERM $$", env.Signaled(env.SIGTERM)},
		{"kill -INT $$", env.Signaled(env.SIGINT)},
	} {
		p := start(t, e, env.Spec{Command: c.cmd, PTY: ptySize})
		st, err := p.Wait(testCtx(t))
		require.NoError(t, err)
		assert.Equal(t, c.want, st, "%q", c.cmd)
	}
	p := start(t, e, env.Spec{Command: `env | grep -c '^CORRAL_PTY'; yes | head -1; echo "shell=${SHELL-unset}"`, PTY: ptySize,
		Env: []string{"SHELL=/no/such/shell"}})
	assert.Equal(t, "0\r\ny\r\nshell=/no/such/shell\r\n", string(readAll(t, p, 0)))
}
