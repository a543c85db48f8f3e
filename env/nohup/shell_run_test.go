package nohup

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A testShell is one of the shells the scripts must run under, as the
// argv that runs a script given after it (sh -c SCRIPT).
type testShell struct {
	name string
	argv []string
	env  []string
}

// forTestShells runs f as a subtest under dash, bash and busybox ash;
// a shell that is missing skips its subtest and says why. busybox ash gets
// a PATH that starts with busybox's own grep, sort and the rest, as in a
// busybox sandbox.
func forTestShells(t *testing.T, f func(t *testing.T, sh testShell)) {
	t.Helper()
	for _, name := range []string{"dash", "bash", "busybox-ash"} {
		t.Run(name, func(t *testing.T) {
			sh, why := lookShell(t, name)
			if why != "" {
				t.Skipf("%s not available on this machine: %s", name, why)
			}
			f(t, sh)
		})
	}
}

func lookShell(t *testing.T, name string) (testShell, string) {
	switch name {
	case "dash", "bash":
		p, err := exec.LookPath(name)
		if err != nil {
			return testShell{}, err.Error()
		}
		return testShell{name: name, argv: []string{p, "-c"}, env: os.Environ()}, ""
	}
	bb := "/bin/busybox"
	if _, err := os.Stat(bb); err != nil {
		p, lerr := exec.LookPath("busybox")
		if lerr != nil {
			return testShell{}, lerr.Error()
		}
		bb = p
	}
	list, err := exec.Command(bb, "--list").Output()
	if err != nil {
		return testShell{}, "busybox --list: " + err.Error()
	}
	dir := filepath.Join(t.TempDir(), "busybox-bin")
	require.NoError(t, os.Mkdir(dir, 0o755))
	for a := range strings.FieldsSeq(string(list)) {
		switch a {
		case "grep", "sort", "sleep", "kill", "tail", "head", "wc", "cat", "env", "id", "rm", "mkdir", "mkfifo", "find", "setsid",
			"stat", "xargs", "tr", "timeout":
			require.NoError(t, os.Symlink(bb, filepath.Join(dir, a)))
		}
	}
	environ := []string{"PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH")}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") {
			environ = append(environ, kv)
		}
	}
	return testShell{name: "busybox-ash", argv: []string{bb, "ash", "-c"}, env: environ}, ""
}

// run runs script under sh and returns its stdout; a non-zero exit fails
// the test with stderr.
func (sh testShell) run(t *testing.T, script string, environ ...string) string {
	t.Helper()
	out, errOut, err := sh.exec(t, script, environ...)
	require.NoError(t, err, "%s: script failed; stderr:\n%s", sh.name, errOut)
	return out
}

func (sh testShell) exec(t *testing.T, script string, environ ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sh.argv[0], append(sh.argv[1:], script)...)
	cmd.Env = append(append([]string(nil), sh.env...), environ...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}
