package envtest_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
)

// fakeCtx bounds a test of the Fake; nothing in it takes real time.
func fakeCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func startFake(t *testing.T, fe *envtest.Fake, spec env.Spec) *envtest.FakeProcess {
	t.Helper()
	p, err := fe.Start(fakeCtx(t), spec)
	require.NoError(t, err)
	require.Same(t, fe.Last(), p)
	return p.(*envtest.FakeProcess)
}

// TestFakeOutputAndExit: a reader blocks until output or the end, output
// replays from any offset, and Exit ends both the stream and Wait.
func TestFakeOutputAndExit(t *testing.T) {
	var fe envtest.Fake // the zero value works
	ctx := fakeCtx(t)
	p := startFake(t, &fe, env.Spec{Command: "scripted"})
	assert.Equal(t, 1000, p.PID())
	assert.Equal(t, "scripted", p.Spec().Command)

	read := make(chan []byte, 1)
	go func() {
		b, _ := envtest.ReadAll(ctx, p)
		read <- b
	}()
	p.WriteOutput("hello ")
	p.WriteOutput("world\n")
	p.Exit(env.Exited(3))
	assert.Equal(t, "hello world\n", string(<-read))

	from, err := envtest.ReadFrom(ctx, p, 6)
	require.NoError(t, err)
	assert.Equal(t, "world\n", string(from), "replay from an offset")
	st, err := p.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, env.Exited(3), st)
	p.Exit(env.Exited(4))
	st, _ = p.Wait(ctx)
	assert.Equal(t, env.Exited(3), st, "only the first end counts")
	assert.Equal(t, 2, p.Waits())

	q := startFake(t, &fe, env.Spec{Command: "second"})
	assert.Equal(t, 1001, q.PID())
	assert.Equal(t, []*envtest.FakeProcess{p, q}, fe.Procs())
}

// TestFakeLose: Wait and the output stream end with Lose's error.
func TestFakeLose(t *testing.T) {
	var fe envtest.Fake
	ctx := fakeCtx(t)
	p := startFake(t, &fe, env.Spec{Command: "x"})
	p.WriteOutput("partial")
	p.Lose(env.ErrSandboxGone)
	_, err := p.Wait(ctx)
	require.ErrorIs(t, err, env.ErrSandboxGone)
	out, err := envtest.ReadAll(ctx, p)
	require.ErrorIs(t, err, env.ErrSandboxGone)
	assert.Equal(t, "partial", string(out))
}

// TestFakeSignals: TERM, INT and HUP end a process by default, KILL
// always; Ignore and Trap script other reactions; a signal after the end
// is ErrExited.
func TestFakeSignals(t *testing.T) {
	ctx := fakeCtx(t)
	for _, tc := range []struct {
		name   string
		script func(*envtest.FakeProcess)
		sigs   []env.Signal
		want   *env.ExitStatus // after the last signal; nil: still running
	}{
		{"TERM ends", nil, []env.Signal{env.SIGTERM}, ptr(env.Signaled(env.SIGTERM))},
		{"INT ends", nil, []env.Signal{env.SIGINT}, ptr(env.Signaled(env.SIGINT))},
		{"USR1 is only recorded", nil, []env.Signal{env.SIGUSR1}, nil},
		{"ignored TERM", func(p *envtest.FakeProcess) { p.Ignore(env.SIGTERM) }, []env.Signal{env.SIGTERM}, nil},
		{"KILL cannot be ignored", func(p *envtest.FakeProcess) { p.Ignore(env.SIGKILL, env.SIGTERM) }, []env.Signal{env.SIGTERM, env.SIGKILL}, ptr(env.Signaled(env.SIGKILL))},
		{"trapped TERM", func(p *envtest.FakeProcess) { p.Trap(env.SIGTERM, env.Exited(0)) }, []env.Signal{env.SIGTERM}, ptr(env.Exited(0))},
		{"trapped USR1", func(p *envtest.FakeProcess) { p.Trap(env.SIGUSR1, env.Exited(9)) }, []env.Signal{env.SIGUSR1}, ptr(env.Exited(9))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fe := &envtest.Fake{}
			if tc.script != nil {
				fe.OnStart = func(p *envtest.FakeProcess) error { tc.script(p); return nil }
			}
			p := startFake(t, fe, env.Spec{Command: "x"})
			for _, sig := range tc.sigs {
				require.NoError(t, p.Signal(ctx, sig))
			}
			assert.Equal(t, tc.sigs, p.Signals())
			if tc.want == nil {
				select {
				case <-p.Exited():
					require.FailNow(t, "the process ended")
				default:
				}
				return
			}
			st, err := p.Wait(ctx)
			require.NoError(t, err)
			assert.Equal(t, *tc.want, st)
			require.ErrorIs(t, p.Signal(ctx, env.SIGKILL), env.ErrExited)
			assert.Equal(t, tc.sigs, p.Signals(), "a signal after the end is not delivered")
		})
	}
	p := startFake(t, &envtest.Fake{}, env.Spec{Command: "x"})
	require.Error(t, p.Signal(ctx, "NOPE"))
}

func ptr[T any](v T) *T { return &v }

func TestFakeStdin(t *testing.T) {
	ctx := fakeCtx(t)
	var fe envtest.Fake
	none := startFake(t, &fe, env.Spec{Command: "x"})
	_, err := none.Write(ctx, []byte("a"))
	require.ErrorIs(t, err, env.ErrStdinClosed, "no stdin asked for")

	p := startFake(t, &fe, env.Spec{Command: "x", Stdin: true})
	_, err = p.Write(ctx, []byte("ab"))
	require.NoError(t, err)
	_, err = p.Write(ctx, []byte("c"))
	require.NoError(t, err)
	require.NoError(t, p.CloseStdin(ctx))
	require.NoError(t, p.CloseStdin(ctx), "closing twice")
	_, err = p.Write(ctx, []byte("late"))
	require.ErrorIs(t, err, env.ErrStdinClosed)
	assert.Equal(t, "abc", string(p.Stdin()))
	assert.True(t, p.StdinClosed())

	tty := startFake(t, &fe, env.Spec{Command: "x", PTY: &env.WindowSize{Rows: 24, Cols: 80}})
	_, err = tty.Write(ctx, []byte("y\r"))
	require.NoError(t, err, "a PTY takes input")
	require.NoError(t, tty.Resize(ctx, env.WindowSize{Rows: 50, Cols: 132}))
	assert.Equal(t, env.WindowSize{Rows: 50, Cols: 132}, tty.Size())
	require.ErrorIs(t, p.Resize(ctx, env.WindowSize{Rows: 1, Cols: 1}), env.ErrUnsupported)
	tty.Exit(env.Exited(0))
	_, err = tty.Write(ctx, []byte("x"))
	require.ErrorIs(t, err, env.ErrExited)
}

func TestFakeSurvivors(t *testing.T) {
	ctx := fakeCtx(t)
	fe := &envtest.Fake{OnStart: func(p *envtest.FakeProcess) error { p.SetSurvivors(4242); return nil }}
	p := startFake(t, fe, env.Spec{Command: "x"})
	got, err := p.Survivors(ctx)
	require.NoError(t, err)
	assert.Equal(t, []int{p.PID(), 4242}, got)
	require.NoError(t, p.Signal(ctx, env.SIGKILL))
	got, err = p.Survivors(ctx)
	require.NoError(t, err)
	assert.Equal(t, []int{4242}, got, "the leftover outlives the process")
}

// TestFakeStartErrors: a bad Spec is rejected, OnStart's error is Start's.
func TestFakeStartErrors(t *testing.T) {
	ctx := fakeCtx(t)
	errDir := &env.SpecError{Field: "Dir", Value: "/nowhere", Reason: "no such directory", Err: env.ErrDirNotFound}
	fe := &envtest.Fake{OnStart: func(p *envtest.FakeProcess) error {
		if p.Spec().Dir != "" {
			return errDir
		}
		return nil
	}}
	_, err := fe.Start(ctx, env.Spec{Command: " "})
	require.ErrorIs(t, err, env.ErrInvalidSpec)
	_, err = fe.Start(ctx, env.Spec{Command: "x", Dir: "/nowhere"})
	require.ErrorIs(t, err, env.ErrDirNotFound)
	assert.Empty(t, fe.Procs(), "a failed start is dropped")
	assert.Nil(t, fe.Last())
}

// TestFakeReattach: a detached process has a Ref; Attach returns another
// handle on it; handles are released independently; a removed process is
// no longer found.
func TestFakeReattach(t *testing.T) {
	ctx := fakeCtx(t)
	fe := &envtest.Fake{Caps: env.Capabilities{Reattach: true}}
	assert.True(t, fe.Capabilities().Reattach)
	plain := startFake(t, fe, env.Spec{Command: "x"})
	_, err := plain.Ref()
	require.ErrorIs(t, err, env.ErrUnsupported)

	p := startFake(t, fe, env.Spec{Command: "x", Detach: true, Tag: "job-1"})
	ref, err := p.Ref()
	require.NoError(t, err)
	assert.Equal(t, "fake", ref.Env)
	assert.Equal(t, p.PID(), ref.PID)
	p.WriteOutput("before\n")
	require.NoError(t, p.Release())
	require.NoError(t, p.Release(), "Release is idempotent")
	_, err = p.Wait(ctx)
	require.ErrorIs(t, err, env.ErrReleased)
	require.ErrorIs(t, p.Signal(ctx, env.SIGTERM), env.ErrReleased)

	h, err := fe.Attach(ctx, ref)
	require.NoError(t, err)
	a := h.(*envtest.FakeProcess)
	require.Error(t, a.Remove(ctx), "Remove while the process runs")
	p.Exit(env.Exited(0)) // scripting works through a released handle
	out, err := envtest.ReadAll(ctx, a)
	require.NoError(t, err)
	assert.Equal(t, "before\n", string(out))
	require.NoError(t, a.Remove(ctx))
	assert.True(t, a.Removed())
	select {
	case <-a.Released():
	default:
		require.FailNow(t, "Remove did not release the handle")
	}
	_, err = fe.Attach(ctx, ref)
	require.ErrorIs(t, err, env.ErrNotFound)
	_, err = fe.Attach(ctx, env.Ref{Env: "other", Data: []byte(`{}`)})
	require.ErrorIs(t, err, env.ErrNotFound)
}

// TestFakeReleaseUnblocks: Release ends a blocked Wait and a blocked read.
func TestFakeReleaseUnblocks(t *testing.T) {
	ctx := fakeCtx(t)
	p := startFake(t, &envtest.Fake{}, env.Spec{Command: "x"})
	rc, err := p.Output(ctx, 0)
	require.NoError(t, err)
	defer rc.Close()
	waited, read := make(chan error, 1), make(chan error, 1)
	go func() { _, err := p.Wait(ctx); waited <- err }()
	go func() { _, err := io.ReadAll(rc); read <- err }()
	require.NoError(t, p.Release())
	require.ErrorIs(t, <-waited, env.ErrReleased)
	require.ErrorIs(t, <-read, env.ErrReleased)
	_, err = p.Output(ctx, 0)
	require.ErrorIs(t, err, env.ErrReleased)
}

// TestFakeClose: Close kills what was not detached, and the Fake refuses
// new work.
func TestFakeClose(t *testing.T) {
	ctx := fakeCtx(t)
	var fe envtest.Fake
	plain := startFake(t, &fe, env.Spec{Command: "x"})
	detached := startFake(t, &fe, env.Spec{Command: "x", Detach: true})
	require.NoError(t, fe.Close())
	require.NoError(t, fe.Close(), "Close is idempotent")
	assert.True(t, fe.Closed())
	st, err := plain.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, env.Signaled(env.SIGKILL), st)
	select {
	case <-detached.Exited():
		require.FailNow(t, "Close ended a detached process")
	default:
	}
	_, err = fe.Start(ctx, env.Spec{Command: "x"})
	require.ErrorIs(t, err, env.ErrReleased)
	ref, err := detached.Ref()
	require.NoError(t, err)
	_, err = fe.Attach(ctx, ref)
	require.ErrorIs(t, err, env.ErrReleased)
}
