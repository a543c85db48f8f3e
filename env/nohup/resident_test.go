package nohup_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	// Four times the 64 KiB the output is read in, in and out. Not more: a
	// shell reads its script a byte per system call, and 2 MiB of it took
	// each shell over a minute at a load of 30 under the race detector
	// (CI, 2026-11-27).
	big := strings.Repeat("0123456789abcdef", 1<<14) // 256 KiB
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
			require.NoErrorf(t, err, "call %d %.40q", i, c.call)
			if code != c.code || out.String() != c.stdout || (c.stderr != "*" && errb.String() != c.stderr) {
				assert.Fail(t, fmt.Sprintf("call %d %.40q = %d, stdout %.60q, stderr %q; want %d, %.60q, %q", i, c.call, code, out.String(), errb.String(), c.code, c.stdout, c.stderr))
			}
		}
		if r.Served() != len(cases) {
			assert.Fail(t, fmt.Sprintf("served %d calls, want %d", r.Served(), len(cases)))
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
	require.Truef(t, errors.Is(err, context.DeadlineExceeded), "Call = %v, want DeadlineExceeded", err)
	d := time.Since(t0)
	require.Truef(t, d <= 10*time.Second, "Call returned after %s", d)
	if _, err := r.Call(testCtx(t), "true", "", nil, nil); !errors.Is(err, nohup.ErrResidentBroken) {
		require.FailNow(t, fmt.Sprintf("Call after an abandoned one = %v, want ErrResidentBroken", err))
	}
}

// TestResidentShellGone: a resident whose shell died under a call reports
// the call as broken. ($$ in the call's subshell is the resident shell.)
func TestResidentShellGone(t *testing.T) {
	r := startResident(t, dash(), "")
	if code, err := r.Call(testCtx(t), "kill -KILL $$", "", nil, nil); err == nil {
		require.FailNow(t, fmt.Sprintf("Call that killed the shell = %d, nil; want an error", code))
	} else if !errors.Is(err, nohup.ErrResidentBroken) {
		require.FailNow(t, fmt.Sprintf("Call that killed the shell = %v, want ErrResidentBroken", err))
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
		code, err := pool.Call(ctx, "", "exit 3", "", nil, nil)
		require.Truef(t, code == 3 && err == nil, "Call = %d, %v", code, err)
	}
	require.Truef(t, started == 1, "3 calls in turn started %d residents, want 1", started)

	// Two long calls take both residents; a third finds none.
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			_, err := pool.Call(ctx, "", "read x <"+fifo(t, release), "", nil, nil)
			assert.NoError(t, err)
		})
	}
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return started == 2 },
		testTimeout, 5*time.Millisecond, "waiting for the two long calls to start two residents")
	// Each New follows its live count: both slots are taken now, and
	// neither call can end before release.
	if _, err := pool.Call(ctx, "", "true", "", nil, nil); !errors.Is(err, nohup.ErrNoResident) {
		assert.Fail(t, fmt.Sprintf("third concurrent Call = %v, want ErrNoResident", err))
	}
	close(release)
	wg.Wait()

	// A different lib replaces the idle residents.
	var out bytes.Buffer
	if _, err := pool.Call(ctx, "v=2\n", `echo "$v"`, "", &out, nil); err != nil || out.String() != "2\n" {
		require.FailNow(t, fmt.Sprintf("Call with a new lib = %q, %v", out.String(), err))
	}

	// Residents that die on their first call: the pool gives up.
	pool.Reset()
	for i := range 3 {
		_, err := pool.Call(ctx, "exit 0\n", "true", "", nil, nil)
		require.Errorf(t, err, "Call %d on a shell that exits before serving succeeded", i)
	}
	require.True(t, pool.Disabled(), "pool still starts residents after 3 died before their first call")
	_, err := pool.Call(ctx, "", "true", "", nil, nil)
	require.Truef(t, errors.Is(err, nohup.ErrNoResident), "Call on a disabled pool = %v, want ErrNoResident", err)
	pool.Close()
}

// fifo returns a path whose read blocks until release is closed.
func fifo(t *testing.T, release chan struct{}) string {
	t.Helper()
	p := t.TempDir() + "/fifo"
	out, err := exec.Command("mkfifo", p).CombinedOutput()
	require.NoErrorf(t, err, "mkfifo: %v %s", err, out)
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
				require.FailNow(t, fmt.Sprint(err))
			}
			if st, err := p.Wait(ctx); err != nil || st != env.Exited(7) {
				require.FailNow(t, fmt.Sprintf("start %d: Wait = %v, %v", i, st, err))
			}
			if got, want := string(readAll(t, p, 0)), "in v"+strconv.Itoa(i)+" "+wd+"\n"; got != want {
				require.FailNow(t, fmt.Sprintf("start %d: output %q, want %q", i, got, want))
			}
			// The spares killed at i == 2 and i == 4 are replaced by
			// fresh directories (i == 3 to 6); the others are used.
			want := i == 2 || i == 7
			require.Truef(t, i < 2 || armedDir(p) == want, "start %d: ran in an armed spare: %v, want %v", i, !want, want)
			switch i {
			case 2:
				// Kill only the parents of the waiting spares.
				for _, d := range waitArmed() {
					var pid, since int
					b, err := os.ReadFile(d + "/parent")
					_, serr := fmt.Sscan(string(b), &pid, &since)
					require.Truef(t, err == nil && serr == nil && pid > 0, "spare %s: parent file %q, %v", d, b, err)
					require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
				}
			case 4:
				// Kill every waiting spare's processes, and only theirs:
				// a kill of the whole base also hit the wrapper of the
				// process that just ended before it ended its stdin
				// holder, which then slept on for good.
				for _, d := range waitArmed() {
					out, _ := exec.Command("pkill", "-e", "-KILL", "-f", "corral-(parent|command) "+d).CombinedOutput()
					require.Truef(t, len(bytes.TrimSpace(out)) != 0, "no processes of the armed spare %s found to kill", d)
				}
			}
		}
		// The signalled path through an armed spare.
		p := start(t, e, env.Spec{Command: "sleep 300"})
		require.NoError(t, p.Signal(ctx, env.SIGTERM))
		if st, err := p.Wait(ctx); err != nil || st != env.Signaled(env.SIGTERM) {
			require.FailNow(t, fmt.Sprintf("Wait after SIGTERM = %v, %v", st, err))
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

// eofLocal is nohuptest.Local whose resident shells a test can cut off the
// way a connection that goes away cuts off its sessions: their stdin
// closes and nothing else happens to them (no signal, no kill).
type eofLocal struct {
	nohuptest.Local
	mu     sync.Mutex
	shells []*exec.Cmd
	stdins []io.Closer
}

func (l *eofLocal) OpenShell(ctx context.Context, script string) (*nohup.Shell, error) {
	cmd := exec.Command(l.Shell, "-c", script)
	cmd.Env = l.Env
	sh, err := nohup.StartShell(cmd)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.shells = append(l.shells, cmd)
	l.stdins = append(l.stdins, sh.Stdin.(io.Closer)) // StartShell's pipe
	l.mu.Unlock()
	return sh, nil
}

// cut closes every shell's stdin and waits until each has exited by
// itself.
func (l *eofLocal) cut(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	shells, stdins := l.shells, l.stdins
	l.shells, l.stdins = nil, nil
	l.mu.Unlock()
	for _, in := range stdins {
		_ = in.Close()
	}
	for _, cmd := range shells {
		done := make(chan struct{})
		go func() {
			for {
				if err := syscall.Kill(cmd.Process.Pid, 0); err != nil {
					break
				}
				var ws syscall.WaitStatus
				if pid, _ := syscall.Wait4(cmd.Process.Pid, &ws, syscall.WNOHANG, nil); pid == cmd.Process.Pid {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(testTimeout):
			require.FailNow(t, fmt.Sprintf("resident shell %d did not exit on end of file", cmd.Process.Pid))
		}
	}
}

// armedSpares waits until base holds want armed spares nobody uses yet,
// and returns their directories.
func armedSpares(t *testing.T, base string, want int) []string {
	t.Helper()
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
		assert.Len(c, ready, want, "armed spares ready")
	}, testTimeout, 5*time.Millisecond, "waiting for the spares to be armed")
	return ready
}

// machinery returns the PIDs of the wrapper processes (parents, wrappers,
// commands) whose directory is under prefix.
func machinery(prefix string) string {
	out, _ := exec.Command("pgrep", "-f", "corral-(parent|command) "+prefix).Output()
	return strings.TrimSpace(string(out))
}

func noMachinery(t *testing.T, prefix, why string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Empty(c, machinery(prefix), "PIDs of wrapper processes under "+prefix)
	}, testTimeout, 10*time.Millisecond, why)
}

// TestArmedSparesEndWithTheirShell cuts the engine's resident shells off
// (end of file on their stdin, as when the ssh connection or the docker
// exec carrying them goes away) while two armed spares wait: the shells
// remove the spares they armed before they exit, and the engine, which
// lives on, starts again on new shells. Such spares used to wait, asleep
// on their FIFOs, until their engine's Close, which may never come.
func TestArmedSparesEndWithTheirShell(t *testing.T) {
	forShells(t, func(t *testing.T, sh nohuptest.Shell) {
		tr := &eofLocal{Local: nohuptest.Local{Shell: sh.Path, Env: sh.Env, Resident: true}}
		base := t.TempDir() + "/state"
		e, err := nohup.New(tr, nohup.Options{Name: "eof-" + sh.Name, BaseDir: base, Shell: sh.Path})
		require.NoError(t, err)
		t.Cleanup(func() { _ = e.Close() })
		ctx := testCtx(t)
		for i := range 3 {
			p := start(t, e, env.Spec{Command: "exit " + strconv.Itoa(i)})
			st, err := p.Wait(ctx)
			require.Truef(t, err == nil && st == env.Exited(i), "start %d: Wait = %v, %v", i, st, err)
		}
		spares := armedSpares(t, base, 2)
		tr.cut(t)
		for _, d := range spares {
			noMachinery(t, d, "waiting for the cut-off shells to end the spares they armed")
			_, err := os.Stat(d)
			assert.Truef(t, os.IsNotExist(err), "spare %s still there after its shell ended: %v", d, err)
		}
		p := start(t, e, env.Spec{Command: "echo again"})
		if st, err := p.Wait(ctx); err != nil || st != env.Exited(0) {
			require.FailNow(t, fmt.Sprintf("start after the cut: Wait = %v, %v", st, err))
		}
		got := string(readAll(t, p, 0))
		require.Truef(t, got == "again\n", "start after the cut: output %q", got)
		require.NoError(t, e.Close())
		noMachinery(t, base, "waiting for Close to end the spares armed after the cut")
	})
}

// TestSweepEndsOrphanedSpares kills the resident shells that armed two
// spares outright (no end of file, no trap: nothing of theirs runs): the
// first start of a new engine on the same sandbox finds the spares' armer
// gone and removes them, while the old engine is still open and leaves a
// live engine's spares alone.
func TestSweepEndsOrphanedSpares(t *testing.T) {
	sh := nohuptest.Shells(t)[0]
	base := t.TempDir() + "/state"
	old, err := nohup.New(&nohuptest.Local{Shell: sh.Path, Env: sh.Env, Resident: true},
		nohup.Options{Name: "old", BaseDir: base, Shell: sh.Path})
	require.NoError(t, err)
	t.Cleanup(func() { _ = old.Close() })
	ctx := testCtx(t)
	for range 3 {
		p := start(t, old, env.Spec{Command: "true"})
		_, err := p.Wait(ctx)
		require.NoError(t, err)
	}
	spares := armedSpares(t, base, 2)
	// A live engine's spares on the same sandbox.
	other, err := nohup.New(&nohuptest.Local{Shell: sh.Path, Env: sh.Env, Resident: true},
		nohup.Options{Name: "other", BaseDir: base, Shell: sh.Path})
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	for range 2 {
		p := start(t, other, env.Spec{Command: "true"})
		_, err := p.Wait(ctx)
		require.NoError(t, err)
	}
	live := slices.DeleteFunc(armedSpares(t, base, 4), func(d string) bool { return slices.Contains(spares, d) })
	for _, d := range spares {
		b, err := os.ReadFile(d + "/armer")
		require.NoError(t, err, "a spare records the shell that armed it")
		var pid, since int
		if _, err := fmt.Sscan(string(b), &pid, &since); err != nil || pid <= 0 {
			require.FailNow(t, fmt.Sprintf("spare %s: armer %q: %v", d, b, err))
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, d := range spares {
		require.NotEmpty(t, machinery(d), "a spare outlives the shell that armed it when that shell is killed")
	}

	fresh, err := nohup.New(&nohuptest.Local{Shell: sh.Path, Env: sh.Env, Resident: true},
		nohup.Options{Name: "fresh", BaseDir: base, Shell: sh.Path})
	require.NoError(t, err)
	t.Cleanup(func() { _ = fresh.Close() })
	p := start(t, fresh, env.Spec{Command: "true"})
	_, err = p.Wait(ctx)
	require.NoError(t, err)
	for _, d := range spares {
		noMachinery(t, d, "waiting for the new engine's sweep to end the orphaned spares")
	}
	for _, d := range live {
		require.NotEmpty(t, machinery(d), "the sweep ended a spare of a live engine")
	}
	require.NoError(t, other.Close())
	require.NoError(t, fresh.Close())
	require.NoError(t, old.Close())
	noMachinery(t, base, "waiting for the engines' Close")
}

// TestRefusedStartKeepsItsSpare starts in a directory that does not exist
// while spares are armed: the launcher refuses before it touches the spare
// it was given, the next start runs in that spare, and Close leaves no
// machinery behind. The refused start's spare used to be forgotten, and
// its three processes outlived Close.
func TestRefusedStartKeepsItsSpare(t *testing.T) {
	forShells(t, func(t *testing.T, sh nohuptest.Shell) {
		tr := &nohuptest.Local{Shell: sh.Path, Env: sh.Env, Resident: true}
		base := t.TempDir() + "/state"
		e, err := nohup.New(tr, nohup.Options{Name: "refused-" + sh.Name, BaseDir: base, Shell: sh.Path})
		require.NoError(t, err)
		t.Cleanup(func() { _ = e.Close() })
		ctx := testCtx(t)
		for range 2 {
			p := start(t, e, env.Spec{Command: "true"})
			_, err := p.Wait(ctx)
			require.NoError(t, err)
		}
		spares := armedSpares(t, base, 2)
		for range 3 {
			_, err := e.Start(ctx, env.Spec{Command: "true", Dir: base + "/no-such-dir"})
			require.ErrorIs(t, err, env.ErrDirNotFound)
		}
		p := start(t, e, env.Spec{Command: "true"})
		_, err = p.Wait(ctx)
		require.NoError(t, err)
		ref, _ := p.Ref()
		var rd struct {
			Dir string `json:"dir"`
		}
		require.NoError(t, json.Unmarshal(ref.Data, &rd))
		require.Contains(t, spares, rd.Dir, "the start after the refused ones runs in the first armed spare")
		require.NoError(t, e.Close())
		noMachinery(t, base, "waiting for Close to end every armed spare")
	})
}
