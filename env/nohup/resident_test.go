package nohup_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
	"github.com/corralhq/corral/env/nohup/nohuptest"
)

// startResident starts ResidentScript(lib) under sh as a child process.
func startResident(t *testing.T, sh nohuptest.Shell, lib string) *nohup.Resident {
	t.Helper()
	r, err := startResidentShell(sh.Path, sh.Env, lib)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// TestResidentFraming sends calls whose output would confuse a sloppy
// framing (no final newline, blank lines, lines that look like trailers,
// binary, more than the read buffer) through one resident, in turn, on
// every shell: each call's stdout, stderr and exit code must come back
// exactly, and the library's definitions must persist between calls while
// a call's own variables do not.
func TestResidentFraming(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 1<<17) // 2 MiB
	cases := []struct {
		call, stdout, stderr string
		code                 int
	}{
		{`printf x`, "x", "", 0},
		{`printf 'a\n'`, "a\n", "", 0},
		{`printf '\n\n'`, "\n\n", "", 0},
		{`printf ''`, "", "", 0},
		{`printf '\ncorral-0123 0\n'; exit 4`, "\ncorral-0123 0\n", "", 4},
		{`printf 'out'; printf 'err\n' >&2; exit 7`, "out", "err\n", 7},
		{`printf '\001\377\000z'`, "\x01\xff\x00z", "", 0},
		{`greet world`, "hello world\n", "", 0},
		{`x=1; echo "$x"`, "1\n", "", 0},
		{`echo "${x:-unset}"`, "unset\n", "", 0},
		{`read line; echo "read:$?"`, "read:1\n", "", 0},
		{"echo 'multi\nline'\necho second", "multi\nline\nsecond\n", "", 0},
		{`kill -TERM $(exec sh -c 'echo $PPID')`, "", "*", 143}, // the shell may say "Terminated"
		{`head -c 2097152 /dev/zero | tr '\0' '-'`, strings.Repeat("-", 2<<20), "", 0},
		{"cat <<'EOF'\n" + big + "\nEOF", big + "\n", "", 0},
		{`exit 255`, "", "", 255},
	}
	forShells(t, func(t *testing.T, sh nohuptest.Shell) {
		r := startResident(t, sh, "greet() { echo \"hello $1\"; }\n")
		for i, c := range cases {
			var out, errb bytes.Buffer
			code, err := r.Call(testCtx(t), c.call, "", &out, &errb)
			if err != nil {
				t.Fatalf("call %d %.40q: %v", i, c.call, err)
			}
			if code != c.code || out.String() != c.stdout || (c.stderr != "*" && errb.String() != c.stderr) {
				t.Errorf("call %d %.40q = %d, stdout %.60q, stderr %q; want %d, %.60q, %q",
					i, c.call, code, out.String(), errb.String(), c.code, c.stdout, c.stderr)
			}
		}
		if r.Served() != len(cases) {
			t.Errorf("served %d calls, want %d", r.Served(), len(cases))
		}
	})
}

// TestResidentCancel abandons a call that runs too long: Call returns as
// soon as ctx ends, and the resident refuses further calls.
func TestResidentCancel(t *testing.T) {
	r := startResident(t, dash(), "")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err := r.Call(ctx, "sleep 30", "", nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Call = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Fatalf("Call returned after %s", d)
	}
	if _, err := r.Call(testCtx(t), "true", "", nil, nil); !errors.Is(err, nohup.ErrResidentBroken) {
		t.Fatalf("Call after an abandoned one = %v, want ErrResidentBroken", err)
	}
}

// TestResidentShellGone: a resident whose shell died under a call reports
// the call as broken. ($$ in the call's subshell is the resident shell.)
func TestResidentShellGone(t *testing.T) {
	r := startResident(t, dash(), "")
	if code, err := r.Call(testCtx(t), "kill -KILL $$", "", nil, nil); err == nil {
		t.Fatalf("Call that killed the shell = %d, nil; want an error", code)
	} else if !errors.Is(err, nohup.ErrResidentBroken) {
		t.Fatalf("Call that killed the shell = %v, want ErrResidentBroken", err)
	}
}

// TestResidentPool checks the pool's bookkeeping: it reuses an idle
// resident, starts at most Max, answers ErrNoResident beyond, drops broken
// ones, gives up after residents that keep dying before their first call,
// and refuses calls after Close.
func TestResidentPool(t *testing.T) {
	var mu sync.Mutex
	started := 0
	pool := &nohup.ResidentPool{Max: 2, New: func(ctx context.Context, lib string) (*nohup.Resident, error) {
		mu.Lock()
		started++
		mu.Unlock()
		return startResident(t, nohuptest.Shell{Path: "/bin/sh"}, lib), nil
	}}
	ctx := testCtx(t)
	for range 3 {
		if code, err := pool.Call(ctx, "", "exit 3", "", nil, nil); code != 3 || err != nil {
			t.Fatalf("Call = %d, %v", code, err)
		}
	}
	if started != 1 {
		t.Fatalf("3 calls in turn started %d residents, want 1", started)
	}

	// Two long calls take both residents; a third finds none.
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if _, err := pool.Call(ctx, "", "read x <"+fifo(t, release), "", nil, nil); err != nil {
				t.Error(err)
			}
		})
	}
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return started == 2 },
		testTimeout, 5*time.Millisecond, "waiting for the two long calls to start two residents")
	// Each New follows its live count: both slots are taken now, and
	// neither call can end before release.
	if _, err := pool.Call(ctx, "", "true", "", nil, nil); !errors.Is(err, nohup.ErrNoResident) {
		t.Errorf("third concurrent Call = %v, want ErrNoResident", err)
	}
	close(release)
	wg.Wait()

	// A different lib replaces the idle residents.
	var out bytes.Buffer
	if _, err := pool.Call(ctx, "v=2\n", `echo "$v"`, "", &out, nil); err != nil || out.String() != "2\n" {
		t.Fatalf("Call with a new lib = %q, %v", out.String(), err)
	}

	// Residents that die on their first call: the pool gives up.
	pool.Reset()
	for i := range 3 {
		if _, err := pool.Call(ctx, "exit 0\n", "true", "", nil, nil); err == nil {
			t.Fatalf("Call %d on a shell that exits before serving succeeded", i)
		}
	}
	if !pool.Disabled() {
		t.Fatal("pool still starts residents after 3 died before their first call")
	}
	if _, err := pool.Call(ctx, "", "true", "", nil, nil); !errors.Is(err, nohup.ErrNoResident) {
		t.Fatalf("Call on a disabled pool = %v, want ErrNoResident", err)
	}
	pool.Close()
}

// fifo returns a path whose read blocks until release is closed.
func fifo(t *testing.T, release chan struct{}) string {
	t.Helper()
	p := t.TempDir() + "/fifo"
	if out, err := exec.Command("mkfifo", p).CombinedOutput(); err != nil {
		t.Fatalf("mkfifo: %v %s", err, out)
	}
	go func() {
		<-release
		// Opening for write unblocks the reader; the line ends its read.
		_ = exec.Command("sh", "-c", fmt.Sprintf("echo go >%s", p)).Run()
	}()
	return p
}

// TestArmedSpares runs a series of starts through resident shells: from
// the third on, each must run in a spare armed after an earlier reply (its
// directory holds the armed report), with stdin, environment, working
// directory and exit status as usual. A spare with any of its processes
// killed (only the parent, or all three) is replaced, not used: a spare
// without its stopped parent would lose the exit status. Close ends the
// spares still armed.
func TestArmedSpares(t *testing.T) {
	forShells(t, func(t *testing.T, sh nohuptest.Shell) {
		tr := &nohuptest.Local{Shell: sh.Path, Env: sh.Env, Resident: true}
		base := t.TempDir() + "/state"
		e, err := nohup.New(tr, nohup.Options{Name: "armed-" + sh.Name, BaseDir: base, Shell: sh.Path})
		require.NoError(t, err)
		ctx := testCtx(t)
		wd := t.TempDir()
		armedDir := func(p env.Process) bool {
			ref, _ := p.Ref()
			var rd struct {
				Dir string `json:"dir"`
			}
			require.NoError(t, json.Unmarshal(ref.Data, &rd))
			_, err := os.Stat(rd.Dir + "/armed")
			return err == nil
		}
		// waitArmed waits until the two spares armed after the last reply
		// are ready, so that a kill finds all their processes.
		waitArmed := func() []string {
			var ready []string
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				ready = nil
				dirs, _ := filepath.Glob(base + "/*")
				for _, d := range dirs {
					if _, err := os.Stat(d + "/spec"); err == nil {
						continue
					}
					if b, err := os.ReadFile(d + "/armed"); err == nil && len(b) > 0 {
						ready = append(ready, d)
					}
				}
				assert.Len(c, ready, 2, "armed spares ready")
			}, testTimeout, 5*time.Millisecond, "waiting for the spares to be armed")
			return ready
		}
		for i := range 8 {
			p := start(t, e, env.Spec{Command: `read x; echo "$x $V $(pwd)"; exit 7`, Stdin: true, Env: []string{"V=v" + strconv.Itoa(i)}, Dir: wd})
			if _, err := p.Write(ctx, []byte("in\n")); err != nil {
				t.Fatal(err)
			}
			if st, err := p.Wait(ctx); err != nil || st != env.Exited(7) {
				t.Fatalf("start %d: Wait = %v, %v", i, st, err)
			}
			if got, want := string(readAll(t, p, 0)), "in v"+strconv.Itoa(i)+" "+wd+"\n"; got != want {
				t.Fatalf("start %d: output %q, want %q", i, got, want)
			}
			// The spares killed at i == 2 and i == 4 are replaced by
			// fresh directories (i == 3 to 6); the others are used.
			if want := i == 2 || i == 7; i >= 2 && armedDir(p) != want {
				t.Fatalf("start %d: ran in an armed spare: %v, want %v", i, !want, want)
			}
			switch i {
			case 2:
				// Kill only the parents of the waiting spares.
				for _, d := range waitArmed() {
					var pid, since int
					b, err := os.ReadFile(d + "/parent")
					if _, serr := fmt.Sscan(string(b), &pid, &since); err != nil || serr != nil || pid <= 0 {
						t.Fatalf("spare %s: parent file %q, %v", d, b, err)
					}
					require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
				}
			case 4:
				// Kill every waiting spare's processes.
				waitArmed()
				out, _ := exec.Command("pkill", "-e", "-KILL", "-f", "corral-(parent|command) "+base).CombinedOutput()
				if len(bytes.TrimSpace(out)) == 0 {
					t.Fatal("no armed spare's processes found to kill")
				}
			}
		}
		// The signalled path through an armed spare.
		p := start(t, e, env.Spec{Command: "sleep 300"})
		require.NoError(t, p.Signal(ctx, env.SIGTERM))
		if st, err := p.Wait(ctx); err != nil || st != env.Signaled(env.SIGTERM) {
			t.Fatalf("Wait after SIGTERM = %v, %v", st, err)
		}
		require.NoError(t, e.Close())
		// Close ended the armed spares: no machinery of this base is left.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			out, _ := exec.Command("pgrep", "-f", "corral-(parent|command) "+base).Output()
			assert.Empty(c, strings.TrimSpace(string(out)), "PIDs of armed spares' processes")
		}, testTimeout, 10*time.Millisecond, "waiting for Close to end the armed spares")
	})
}

// startResidentShell starts ResidentScript(lib) as shell -c on this
// machine, with environ (nil: os.Environ()), and returns its Resident;
// Close kills and reaps the shell.
func startResidentShell(shell string, environ []string, lib string) (*nohup.Resident, error) {
	cmd := exec.Command(shell, "-c", nohup.ResidentScript(lib))
	cmd.Env = environ
	sh, err := nohup.StartShell(cmd)
	if err != nil {
		return nil, err
	}
	return nohup.NewResident(lib, sh.Stdin, sh.Stdout, sh.Stderr, sh.Stop), nil
}
