package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/docker"
)

// topHas reports whether the engine's own view of the container's
// processes (docker top, read from the host) has a command line containing
// s. It does not depend on anything inside the container.
func topHas(t *testing.T, cli *client.Client, name, s string) (bool, int) {
	t.Helper()
	top, err := cli.ContainerTop(dockerCtx(t), name, client.ContainerTopOptions{})
	require.NoErrorf(t, err, "docker top %s", name)
	cmdCol := len(top.Titles) - 1
	found := false
	for _, p := range top.Processes {
		if strings.Contains(p[cmdCol], s) {
			found = true
		}
	}
	return found, len(top.Processes)
}

// A process tree killed after its timeout leaves nothing behind in the
// container: not its children, not an escapee that called setsid.
func TestDockerTimeoutKillLeavesNothing(t *testing.T) {
	cli := requireDocker(t)
	name := startUserContainer(t, cli)
	e := openDocker(t, docker.SchemeContainer+name)
	ctx := dockerCtx(t)

	p, err := e.Start(ctx, env.Spec{Command: `sleep 300 & setsid sleep 300 & (sleep 300 &); echo started; sleep 300`})
	require.NoError(t, err)
	defer p.Release()
	waitOutput(t, p, "started\n")

	// The timeout: Wait gives up, then the tree is killed.
	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = p.Wait(wctx)
	cancel()
	require.Truef(t, errors.Is(err, context.DeadlineExceeded), "Wait before the kill = %v, want the deadline", err)
	if found, _ := topHas(t, cli, name, "sleep 300"); !found {
		require.FailNow(t, "docker top shows no `sleep 300` before the kill: the test would prove nothing")
	}
	require.NoError(t, p.Signal(ctx, env.SIGKILL), "Signal KILL")
	st, err := p.Wait(ctx)
	require.Truef(t, err == nil && st == env.Signaled(env.SIGKILL), "Wait after kill = %v, %v; want killed by KILL", st, err)
	waitNoSurvivors(t, p)

	out, st := runIn(t, e, "ps -o pid,args")
	assert.Truef(t, st.Success() && !strings.Contains(out, "sleep 300"), "ps inside %s after the kill (%v):\n%s", name, st, out)
	found, _ := topHas(t, cli, name, "sleep 300")
	assert.Falsef(t, found, "docker top %s still shows `sleep 300` after the kill", name)
}

// waitNoSurvivors waits until nothing of p's tree is left, as the registry
// does after a kill.
func waitNoSurvivors(t *testing.T, p env.Process) {
	t.Helper()
	ctx := dockerCtx(t)
	for {
		left, err := p.Survivors(ctx)
		require.NoError(t, err, "Survivors")
		if len(left) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			require.FailNow(t, fmt.Sprintf("processes of the tree still alive after the kill: %v", left))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// A fork bomb hits the sandbox's pids limit, not the host; the
// Environment keeps working: the bomb is killed and new commands run.
func TestDockerForkBombContained(t *testing.T) {
	cli := requireDocker(t)
	const limit = 96
	e, err := docker.Open(dockerCtx(t), fmt.Sprintf("docker-image://%s?pids=%d", dockerTestImage, limit),
		docker.Options{Owner: uniqueName("it-bomb-")})
	require.NoError(t, err)
	defer e.Close()
	name := containerOf(e)
	ctx := dockerCtx(t)

	p, err := e.Start(ctx, env.Spec{Command: `bomb() { bomb | bomb & }; bomb; sleep 300`})
	require.NoError(t, err)
	defer p.Release()
	// The shell reports the failed fork once the limit is reached.
	waitOutput(t, p, "can't fork")
	_, n := topHas(t, cli, name, "sleep")
	assert.Truef(t, n <= limit, "docker top shows %d processes in a sandbox limited to %d", n, limit)

	// Every exec competes with the bomb for a pid: the Environment may
	// report itself unavailable for a moment, but not the sandbox gone.
	for {
		err := p.Signal(ctx, env.SIGKILL)
		if err == nil || errors.Is(err, env.ErrExited) {
			break
		}
		require.Truef(t, errors.Is(err, env.ErrUnavailable), "Signal KILL to the bomb: %v", err)
		require.Truef(t, ctx.Err() == nil, "the bomb could not be killed: %v", err)
	}
	// The wrapper that records the exit status competes for pids too; when
	// it could not, the process is reported lost (ErrNotFound), which is
	// honest. Anything else, or a hang, is a failure.
	if st, err := p.Wait(ctx); err != nil && !errors.Is(err, env.ErrNotFound) {
		require.FailNow(t, fmt.Sprintf("Wait for the bomb: %v", err))
	} else {
		t.Logf("bomb ended: %v, %v", st, err)
	}
	waitNoSurvivors(t, p)
	out, st := runIn(t, e, "echo still-responsive")
	assert.Truef(t, st.Success() && out == "still-responsive\n", "after the bomb: %q, %v", out, st)
}

// A container stopped from outside while a process runs: Wait and Output
// return an error matching env.ErrSandboxGone, and nothing hangs.
func TestDockerContainerStoppedUnderProcess(t *testing.T) {
	cli := requireDocker(t)
	name := startUserContainer(t, cli)
	e := openDocker(t, docker.SchemeContainer+name)
	ctx := dockerCtx(t)

	p, err := e.Start(ctx, env.Spec{Command: `echo ready; sleep 300`})
	require.NoError(t, err)
	defer p.Release()
	waitOutput(t, p, "ready\n")

	r, err := p.Output(ctx, 0)
	require.NoError(t, err)
	defer r.Close()
	readErr := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, r)
		readErr <- err
	}()

	timeout := 1
	if _, err := cli.ContainerStop(ctx, name, client.ContainerStopOptions{Timeout: &timeout}); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	if _, err := p.Wait(ctx); !errors.Is(err, env.ErrSandboxGone) {
		assert.Fail(t, fmt.Sprintf("Wait after the container stopped = %v, want ErrSandboxGone", err))
	}
	select {
	case err := <-readErr:
		assert.Truef(t, errors.Is(err, env.ErrSandboxGone), "Output after the container stopped ended with %v, want ErrSandboxGone", err)
	case <-ctx.Done():
		require.FailNow(t, "Output reader hangs after the container stopped")
	}
	if _, err := e.Start(ctx, env.Spec{Command: "true"}); !errors.Is(err, env.ErrSandboxGone) || !strings.Contains(err.Error(), name) {
		assert.Fail(t, fmt.Sprintf("Start in the stopped container = %v, want ErrSandboxGone naming %s", err, name))
	}
}

// The Environment is dropped (closed, or abandoned as by a crash) and
// opened again while five processes run: all are re-attached, with
// complete output in order and the right exit codes.
func TestDockerReattachFiveProcesses(t *testing.T) {
	cli := requireDocker(t)
	const lines = 40
	cmd := func(n int) string {
		return fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo "p%d line $i"; i=$((i+1)); sleep 0.05; done; exit %d`, lines, n, 10+n)
	}
	run := func(t *testing.T, target string, opts docker.Options, drop func(env.Environment)) {
		ctx := dockerCtx(t)
		first, err := docker.Open(ctx, target, opts)
		require.NoError(t, err)
		t.Cleanup(func() { removeContainer(cli, containerOf(first)) })
		var refs []env.Ref
		for n := range 5 {
			p, err := first.Start(ctx, env.Spec{Command: cmd(n), Detach: true})
			require.NoError(t, err)
			ref, err := p.Ref()
			require.NoError(t, err, "Ref")
			refs = append(refs, ref)
			waitOutput(t, p, fmt.Sprintf("p%d line 2\n", n))
			p.Release()
		}
		drop(first)

		second, err := docker.Open(ctx, target, opts)
		require.NoErrorf(t, err, "re-open %s", target)
		defer second.Close()
		if second.Name() != first.Name() {
			require.FailNow(t, fmt.Sprintf("re-opened sandbox is %s, was %s", second.Name(), first.Name()))
		}
		for n, ref := range refs {
			if ref.Env != second.Name() {
				assert.Fail(t, fmt.Sprintf("Ref.Env = %q, Environment is %q", ref.Env, second.Name()))
			}
			p, err := second.Attach(ctx, ref)
			require.NoErrorf(t, err, "Attach p%d", n)
			out := readAll(t, p, 0)
			var want strings.Builder
			for i := range lines {
				fmt.Fprintf(&want, "p%d line %d\n", n, i)
			}
			if out != want.String() {
				assert.Fail(t, fmt.Sprintf("p%d output after re-attach:\n%s\nwant:\n%s", n, out, want.String()))
			}
			st, err := p.Wait(ctx)
			assert.Truef(t, err == nil && st == env.Exited(10+n), "p%d Wait = %v, %v; want exit %d", n, st, err, 10+n)
			p.Release()
		}
	}

	t.Run("closed", func(t *testing.T) {
		target := fmt.Sprintf("docker-image://%s?persist=true&name=%s", dockerTestImage, uniqueName("corral-it-reattach-"))
		run(t, target, docker.Options{}, func(e env.Environment) {
			require.NoError(t, e.Close(), "Close")
		})
	})
	t.Run("crashed", func(t *testing.T) {
		// The default target: the sandbox is found again by its derived
		// name and labels. The first Environment is never closed, as if its
		// supervisor had died; its handle is released at the end only to
		// free its connection.
		opts := docker.Options{Owner: uniqueName("it-crash-")}
		var abandoned env.Environment
		t.Cleanup(func() {
			if abandoned != nil {
				_ = abandoned.Close()
			}
		})
		run(t, "docker-image://"+dockerTestImage, opts, func(e env.Environment) { abandoned = e })
	})
}

// Inside a default sandbox the process has exactly the declared
// capabilities and cannot gain privileges; the sandbox is removed on Close.
func TestDockerSandboxHardening(t *testing.T) {
	cli := requireDocker(t)
	ctx := dockerCtx(t)
	e, err := docker.Open(ctx, "docker-image://"+dockerTestImage, docker.Options{Owner: uniqueName("it-hard-")})
	require.NoError(t, err)
	name := containerOf(e)
	closed := false
	defer func() {
		if !closed {
			e.Close()
		}
	}()

	out, st := runIn(t, e, `grep -E '^(CapEff|CapBnd|NoNewPrivs):' /proc/self/status`)
	require.Truef(t, st.Success(), "reading /proc/self/status: %v\n%s", st, out)
	// CHOWN(0) DAC_OVERRIDE(1) FOWNER(3) KILL(5) SETGID(6) SETUID(7)
	const declared = 1<<0 | 1<<1 | 1<<3 | 1<<5 | 1<<6 | 1<<7
	fields := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, ":")
		fields[k] = strings.TrimSpace(v)
	}
	want := fmt.Sprintf("%016x", declared)
	if fields["CapEff"] != want || fields["CapBnd"] != want {
		assert.Fail(t, fmt.Sprintf("CapEff %s, CapBnd %s; want %s (the declared set)", fields["CapEff"], fields["CapBnd"], want))
	}
	if fields["NoNewPrivs"] != "1" {
		assert.Fail(t, fmt.Sprintf("NoNewPrivs = %q, want 1", fields["NoNewPrivs"]))
	}

	// PID 1 is the engine's init (docker-init, tini), not the idle loop.
	out, st = runIn(t, e, `tr '\0' '\n' </proc/1/cmdline | head -n1`)
	first := strings.TrimSpace(out)
	assert.Truef(t, st.Success() && strings.Contains(first, "init"), "PID 1 is %q (%v), want an init process", first, st)

	res, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	require.NoError(t, err)
	l := res.Container.Config.Labels
	assert.Truef(t, l[docker.LabelManaged] == "true" && strings.HasPrefix(l[docker.LabelOwner], "it-hard-"), "labels = %v", l)
	hc := res.Container.HostConfig
	assert.Truef(t, hc.PidsLimit != nil && *hc.PidsLimit == docker.DefaultPidsLimit && hc.Memory == docker.DefaultMemory, "limits: pids %v memory %d", hc.PidsLimit, hc.Memory)

	closed = true
	require.NoError(t, e.Close(), "Close")
	// By ID: Close renames the sandbox (corral-closed-ID) while the
	// engine deletes it; WaitRemoved waits for that.
	require.NoError(t, docker.WaitRemoved(ctx), "WaitRemoved")
	if _, err := cli.ContainerInspect(ctx, res.Container.ID, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		assert.Fail(t, fmt.Sprintf("sandbox %s still exists after Close (inspect: %v)", name, err))
	}
}
