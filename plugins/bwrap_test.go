package plugins_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
	"github.com/corralhq/corral/plugins"
)

// requireBwrap skips when bubblewrap cannot run here (not installed, or no
// namespaces for this user): outside CI. In CI, where .ci/run installs it,
// a missing bwrap fails.
func requireBwrap(t *testing.T) {
	t.Helper()
	out, err := exec.Command("bwrap", "--ro-bind", "/", "/", "--tmpfs", "/tmp", "--unshare-net", "--unshare-pid",
		"--dev", "/dev", "--proc", "/proc", "true").CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("bwrap cannot run here: %v: %s", err, out)
		require.True(t, os.Getenv("CI") == "", fmt.Sprintln(msg))
		t.Skip(msg)
	}
}

// namedSandbox returns a bwrap://NAME target with its records in a test
// directory, and removes the sandbox at cleanup.
func namedSandbox(t *testing.T) string {
	t.Helper()
	state := t.TempDir()
	name := fmt.Sprintf("t%d", rand.Int64())
	t.Cleanup(func() {
		b, err := os.ReadFile(filepath.Join(state, name+".json"))
		if err != nil {
			return
		}
		var rec struct{ PID int }
		if json.Unmarshal(b, &rec) == nil && rec.PID > 0 {
			syscall.Kill(rec.PID, syscall.SIGKILL)
		}
	})
	return "bwrap://" + name + "?state=" + state
}

// TestConformanceBwrap runs the shared suite through the bubblewrap plugin,
// whose engine runs its calls on resident shells (see resident_test.go).
func TestConformanceBwrap(t *testing.T) {
	requireBwrap(t)
	target := namedSandbox(t)
	opts, entries := countEntries(t)
	envtest.Run(t, envtest.Config{
		// the sandbox runs on this machine, under the test.
		SignalBaseline: envtest.LocalSignalBaseline,
		// It sees this machine's /usr read-only, util-linux script and
		// /dev/ptmx included: the PTY cases run on a terminal there.
		PTY: true,
		New: func(t *testing.T) env.Environment {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			e, err := plugins.Open(ctx, target, opts)
			require.NoError(t, err)
			return e
		},
	})
	// The suite's tests are parallel: they are done at cleanup.
	t.Cleanup(func() {
		shells, execs := entries.counts(t)
		t.Logf("sandbox entries: %d resident shells, %d execs", shells, execs)
		assert.True(t, shells != 0, "the suite ran without resident shells")
	})
}

// TestBwrapIsolation checks that the sandbox really isolates: the root is
// read-only, /tmp is private, there is no network but loopback, and the
// host's processes are invisible.
func TestBwrapIsolation(t *testing.T) {
	requireBwrap(t)
	e := openPlugin(t, "bwrap://")
	t.Cleanup(func() { e.Close() })
	hostFile, err := os.CreateTemp("", "corral-bwrap-host-")
	require.NoError(t, err)
	hostFile.Close()
	t.Cleanup(func() { os.Remove(hostFile.Name()) })

	script := `
if touch /corral-bwrap-probe 2>/dev/null; then echo root=writable; else echo root=readonly; fi
if [ -e ` + hostFile.Name() + ` ]; then echo tmp=shared; else echo tmp=private; fi
echo > /tmp/inside && echo tmp=writable
echo links=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ' ')
echo procs=$(ls /proc | grep -c '^[0-9]')
echo ppid1=$(ps -o pid= -p 1 | tr -d ' ')
`
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := e.Start(ctx, env.Spec{Command: script})
	require.NoError(t, err)
	defer p.Release()
	out := readAll(t, p)
	if st, err := p.Wait(ctx); err != nil || !st.Success() {
		require.FailNow(t, fmt.Sprintf("wait = %v, %v; output %q", st, err, out))
	}
	for _, want := range []string{"root=readonly", "tmp=private", "tmp=writable"} {
		assert.Truef(t, strings.Contains(out, want+"\n"), "output lacks %q:\n%s", want, out)
	}
	assert.Truef(t, strings.Contains(out, "links=lo\n"), "network interfaces other than lo visible:\n%s", out)
	// Own PID namespace: a handful of processes, not the host's hundreds.
	var procs int
	for _, line := range strings.Split(out, "\n") {
		if n, ok := strings.CutPrefix(line, "procs="); ok {
			fmt.Sscan(n, &procs)
		}
	}
	assert.Truef(t, procs != 0 && procs <= 20, "sandbox sees %d processes, want its own few:\n%s", procs, out)
}

// TestBwrapSurvivesPluginCrash: a named sandbox outlives its plugin, so a
// process inside is re-attached by the restarted plugin.
func TestBwrapSurvivesPluginCrash(t *testing.T) {
	requireBwrap(t)
	e := openPlugin(t, namedSandbox(t))
	t.Cleanup(func() { e.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := e.Start(ctx, env.Spec{Command: "read line; echo got $line; exit 3", Stdin: true})
	require.NoError(t, err)
	killPlugin(t, e)
	waitHostSeesDeath(t, e)
	if _, err := p.Write(ctx, []byte("hello\n")); err != nil {
		require.FailNow(t, fmt.Sprintf("Write after the plugin died: %v", err))
	}
	st, err := p.Wait(ctx)
	require.Truef(t, err == nil && st == env.Exited(3), "Wait = %v, %v; want exit status 3", st, err)
	out := readAll(t, p)
	assert.Truef(t, out == "got hello\n", "output %q", out)
}

// TestBwrapBadName: a bad sandbox name is refused before anything starts,
// with the plugin's own words.
func TestBwrapBadName(t *testing.T) {
	requireBwrap(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := openPluginErr(ctx, "bwrap://bad$name")
	require.Truef(t, err != nil && strings.Contains(err.Error(), "must match"), "Open with a bad name = %v, want a clear refusal", err)
	assert.Falsef(t, errors.Is(err, env.ErrUnavailable), "a bad name is not a transient failure: %v", err)
}
