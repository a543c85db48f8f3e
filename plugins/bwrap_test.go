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
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
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
			if err != nil {
				t.Fatal(err)
			}
			return e
		},
	})
	// The suite's tests are parallel: they are done at cleanup.
	t.Cleanup(func() {
		shells, execs := entries.counts(t)
		t.Logf("sandbox entries: %d resident shells, %d execs", shells, execs)
		if shells == 0 {
			t.Error("the suite ran without resident shells")
		}
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
	if err != nil {
		t.Fatal(err)
	}
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
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	out := readAll(t, p)
	if st, err := p.Wait(ctx); err != nil || !st.Success() {
		t.Fatalf("wait = %v, %v; output %q", st, err, out)
	}
	for _, want := range []string{"root=readonly", "tmp=private", "tmp=writable"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "links=lo\n") {
		t.Errorf("network interfaces other than lo visible:\n%s", out)
	}
	// Own PID namespace: a handful of processes, not the host's hundreds.
	var procs int
	for _, line := range strings.Split(out, "\n") {
		if n, ok := strings.CutPrefix(line, "procs="); ok {
			fmt.Sscan(n, &procs)
		}
	}
	if procs == 0 || procs > 20 {
		t.Errorf("sandbox sees %d processes, want its own few:\n%s", procs, out)
	}
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
	if err != nil {
		t.Fatal(err)
	}
	killPlugin(t, e)
	waitHostSeesDeath(t, e)
	if _, err := p.Write(ctx, []byte("hello\n")); err != nil {
		t.Fatalf("Write after the plugin died: %v", err)
	}
	st, err := p.Wait(ctx)
	if err != nil || st != env.Exited(3) {
		t.Fatalf("Wait = %v, %v; want exit status 3", st, err)
	}
	if out := readAll(t, p); out != "got hello\n" {
		t.Errorf("output %q", out)
	}
}

// TestBwrapBadName: a bad sandbox name is refused before anything starts,
// with the plugin's own words.
func TestBwrapBadName(t *testing.T) {
	requireBwrap(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := openPluginErr(ctx, "bwrap://bad$name")
	if err == nil || !strings.Contains(err.Error(), "must match") {
		t.Fatalf("Open with a bad name = %v, want a clear refusal", err)
	}
	if errors.Is(err, env.ErrUnavailable) {
		t.Errorf("a bad name is not a transient failure: %v", err)
	}
}
