package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	xssh "golang.org/x/crypto/ssh"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/ssh"
	"github.com/corralhq/corral/env/ssh/sshtest"
	"github.com/corralhq/corral/internal/testing/proctest"
	"github.com/corralhq/corral/registry"
)

// A process keeps running while the connection is down, finishes without
// it, and after the reconnect its complete output and real exit code
// arrive. The drop is made both ways: the client closes its TCP
// connection (and is kept from reconnecting), and sshd is stopped with all
// its connection processes, then started again.
func TestSSHConnectionLossMidRun(t *testing.T) {
	for _, how := range []string{"client-side cut", "sshd restart"} {
		t.Run(how, func(t *testing.T) {
			srv := sshtest.Start(t)
			dialer := &gatedDialer{}
			opts := sshOptions(t, srv, t.TempDir()+"/state")
			opts.Dial = dialer.Dial
			e := sshOpen(t, srv, opts)

			marker := proctest.Marker()
			gate := filepath.Join(t.TempDir(), "go-on")
			// The second half of the output is written only after the
			// test lets it, while the connection is down.
			cmd := fmt.Sprintf(": %s; echo before; while [ ! -e %s ]; do sleep 0.05; done; seq 1 20000; exit 5", marker, gate)
			p, err := e.Start(sshCtx(t), env.Spec{Command: cmd})
			require.NoError(t, err, "Start")
			t.Cleanup(func() { proctest.KillWith(marker) })
			sshReadUntil(t, p, "before\n")

			switch how {
			case "client-side cut":
				dialer.cutAndClose()
			case "sshd restart":
				srv.Stop()
			}
			require.NoError(t, os.WriteFile(gate, nil, 0o600))
			// The process ends on its own while no connection exists.
			sshWaitFor(t, "the process to finish while disconnected", func() bool { return len(proctest.PIDsWithWord(marker)) == 0 })
			switch how {
			case "client-side cut":
				dialer.open()
			case "sshd restart":
				srv.Restart(t)
			}

			out := sshReadAll(t, p)
			if want := "before\n" + sshExpectedLines(20000); out != want {
				require.FailNow(t, fmt.Sprintf("output after reconnect: %d bytes, want %d (first difference near %d)", len(out), len(want), firstDiff(out, want)))
			}
			st, err := p.Wait(sshCtx(t))
			require.Truef(t, err == nil && st == env.Exited(5), "Wait: %v, %v; want exit status 5", st, err)
			if dialer.count() < 2 {
				require.FailNow(t, fmt.Sprintf("dialled %d times; the test did not exercise a reconnect", dialer.count()))
			}
		})
	}
}

func firstDiff(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// A host presenting a key other than the known one is refused, loudly, and
// nothing runs there: at Open, and on a live Environment whose host
// changed its key between two connections.
func TestSSHWrongHostKeyRunsNothing(t *testing.T) {
	srv := sshtest.Start(t)
	dir := t.TempDir()

	t.Run("at open", func(t *testing.T) {
		opts := sshOptions(t, srv, dir+"/state")
		other := sshtest.WriteKey(t, filepath.Join(t.TempDir(), "other"), "").Signer.PublicKey()
		kh := filepath.Join(t.TempDir(), "known_hosts")
		line := fmt.Sprintf("[127.0.0.1]:%d %s", srv.Port, strings.TrimSpace(string(xssh.MarshalAuthorizedKey(other))))
		require.NoError(t, os.WriteFile(kh, []byte(line+"\n"), 0o600))
		opts.KnownHostsFiles = []string{kh}
		marker := filepath.Join(dir, "ran-at-open")
		reg := sshRegistry(t, srv, opts)
		_, err := reg.Run(sshCtx(t), registry.RunOptions{StartOptions: registry.StartOptions{
			Backend: srv.Target(), Command: "touch " + marker,
		}})
		require.Truef(t, errors.Is(err, ssh.ErrHostKeyChanged) && strings.Contains(err.Error(), "HAS CHANGED"), "Run on a host with a wrong key: %v; want a loud ErrHostKeyChanged", err)
		if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
			require.FailNow(t, fmt.Sprintf("the command ran on a host with the wrong key: %v", err))
		}
	})

	t.Run("after reconnect", func(t *testing.T) {
		e, err := ssh.Open(sshCtx(t), srv.Target(), sshOptions(t, srv, dir+"/state"))
		require.NoError(t, err)
		defer func() {
			// Close cannot reach the host either, and must say why.
			err := e.Close()
			assert.Truef(t, err == nil || errors.Is(err, ssh.ErrHostKeyChanged), "Close: %v", err)
		}()
		if _, err := e.Start(sshCtx(t), env.Spec{Command: "true"}); err != nil {
			require.FailNow(t, fmt.Sprintf("Start before the key change: %v", err))
		}
		srv.RotateHostKeys(t)
		marker := filepath.Join(dir, "ran-after-rotation")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_, err = e.Start(ctx, env.Spec{Command: "touch " + marker})
		require.Truef(t, errors.Is(err, ssh.ErrHostKeyChanged), "Start after the host key changed: %v; want ErrHostKeyChanged", err)
		if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
			require.FailNow(t, fmt.Sprintf("the command ran on a host whose key changed: %v", err))
		}
	})
}

func sshRegistry(t *testing.T, srv *sshtest.Server, opts ssh.Options) *registry.Registry {
	t.Helper()
	reg, err := registry.New(registry.Config{
		Open: func(ctx context.Context, target string) (env.Environment, error) {
			return ssh.Open(ctx, target, opts)
		},
		DefaultBackend: srv.Target(),
		Logger:         slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	return reg
}

// A command that outlives its timeout is killed with its whole tree on
// the remote host: children, grandchildren, a setsid escapee and a shell
// that ignores SIGTERM.
func TestSSHTimeoutKillsRemoteTree(t *testing.T) {
	srv := sshtest.Start(t)
	reg := sshRegistry(t, srv, sshOptions(t, srv, t.TempDir()+"/state"))
	m := []string{proctest.Marker(), proctest.Marker(), proctest.Marker(), proctest.Marker()}
	t.Cleanup(func() { proctest.KillWith(m...) })
	cmd := fmt.Sprintf("trap '' TERM; sleep %s & (sleep %s &); setsid sleep %s & sleep %s; wait", m[0], m[1], m[2], m[3])

	res, err := reg.Run(sshCtx(t), registry.RunOptions{
		StartOptions: registry.StartOptions{Command: cmd},
		Timeout:      3 * time.Second,
		Grace:        500 * time.Millisecond,
	})
	require.NoError(t, err, "Run")
	require.Truef(t, res.TimedOut == "timeout", "Run ended %s (%s), want a timeout kill", res.State, res.TimedOut)
	for _, marker := range m {
		pids := proctest.PIDsWithWord(marker)
		assert.Truef(t, len(pids) <= 0, "process with marker %s survived the timeout kill: pids %v", marker, pids)
	}
}

// Fifty processes at once on one host, all over a single connection, all
// with complete output and their own exit codes.
func TestSSHFiftyConcurrentProcesses(t *testing.T) {
	srv := sshtest.Start(t)
	dialer := &gatedDialer{}
	opts := sshOptions(t, srv, t.TempDir()+"/state")
	opts.Dial = dialer.Dial
	e := sshOpen(t, srv, opts)

	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := sshCtx(t)
			p, err := e.Start(ctx, env.Spec{Command: fmt.Sprintf("echo start %d; seq 1 %d; sleep 1; echo end %d; exit %d", i, 100*i, i, i%7)})
			if err != nil {
				errs <- fmt.Errorf("start %d: %w", i, err)
				return
			}
			defer p.Release()
			out, err := readAllCtx(ctx, p)
			if err != nil {
				errs <- fmt.Errorf("output %d: %w", i, err)
				return
			}
			want := fmt.Sprintf("start %d\n%send %d\n", i, sshExpectedLines(100*i), i)
			if out != want {
				errs <- fmt.Errorf("process %d: %d bytes of output, want %d", i, len(out), len(want))
			}
			st, err := p.Wait(ctx)
			if err != nil || st != env.Exited(i%7) {
				errs <- fmt.Errorf("process %d: %v, %v; want exit %d", i, st, err, i%7)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.Fail(t, fmt.Sprint(err))
	}
	if dialer.count() != 1 {
		assert.Fail(t, fmt.Sprintf("%d connections were made; want all processes on one", dialer.count()))
	}
}

// A working directory or environment value full of shell syntax reaches
// the process literally and runs nothing.
func TestSSHHostileDirAndEnvArriveLiterally(t *testing.T) {
	srv := sshtest.Start(t)
	e := sshOpen(t, srv, sshOptions(t, srv, t.TempDir()+"/state"))
	tag := proctest.Marker()
	pwned := "/tmp/pwned-" + tag
	t.Cleanup(func() { os.Remove(pwned) })
	hostile := "/tmp/a; touch " + pwned + " #"
	quoted := "it's $(touch " + pwned + ") `touch " + pwned + "` \"" + pwned + "\""

	require.NoError(t, os.MkdirAll(hostile, 0o700))
	t.Cleanup(func() {
		os.Remove(hostile)
		os.Remove(filepath.Dir(hostile)) // "/tmp/a; touch /tmp", left if another test uses it
		os.Remove("/tmp/a; touch ")
	})

	p, err := e.Start(sshCtx(t), env.Spec{
		Command: `pwd; printf '%s\n' "$HOSTILE" "$QUOTED"`,
		Dir:     hostile,
		Env:     []string{"HOSTILE=" + hostile, "QUOTED=" + quoted},
	})
	require.NoError(t, err, "Start")
	out := sshReadAll(t, p)
	if st, err := p.Wait(sshCtx(t)); err != nil || !st.Success() {
		require.FailNow(t, fmt.Sprintf("Wait: %v %v (output %q)", st, err, out))
	}
	want := hostile + "\n" + hostile + "\n" + quoted + "\n"
	assert.Truef(t, out == want, "output %q, want %q", out, want)
	if _, err := os.Stat(pwned); !errors.Is(err, os.ErrNotExist) {
		require.FailNow(t, fmt.Sprintf("%s was created: the hostile value was executed", pwned))
	}

	// A hostile directory that does not exist is reported as such, and
	// still runs nothing.
	missing := "/tmp/nonexistent-" + tag + "; touch " + pwned + " #"
	_, err = e.Start(sshCtx(t), env.Spec{Command: "true", Dir: missing})
	assert.Truef(t, errors.Is(err, env.ErrDirNotFound), "Start in a missing hostile dir: %v, want ErrDirNotFound", err)
	if _, err := os.Stat(pwned); !errors.Is(err, os.ErrNotExist) {
		require.FailNow(t, fmt.Sprintf("%s was created by the missing-dir start", pwned))
	}
}

func readAllCtx(ctx context.Context, p env.Process) (string, error) {
	rc, err := p.Output(ctx, 0)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := rc.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			if errors.Is(err, io.EOF) {
				return b.String(), nil
			}
			return b.String(), err
		}
	}
}
