package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
)

// Transport runs sh scripts in one container through the Engine API's exec
// endpoints. It implements nohup.Transport. One Transport shares one
// engine client (and its connection pool) among all its calls.
type Transport struct {
	cli  *client.Client
	id   string // the container's name or ID, as the engine accepts it
	name string // the container's name, for messages
	user string // exec user; empty means the container's
}

// NewTransport returns a Transport for container (a name or ID) on the
// engine cli. It does not check that the container exists: Exec reports
// that.
func NewTransport(cli *client.Client, container, user string) *Transport {
	return &Transport{cli: cli, id: container, name: container, user: user}
}

// transportFor execs by ID (a container re-created under the same name is
// another sandbox) and names the container in errors.
func transportFor(cli *client.Client, id, name string) *Transport {
	return &Transport{cli: cli, id: id, name: name}
}

// Exec runs script as /bin/sh -c script in the container. stdin, when
// non-nil, is copied to the script and then closed; it must not block
// forever (the nohup engine hands in byte buffers). Output is
// demultiplexed into stdout and stderr (nil: discarded).
//
// Errors match env.ErrSandboxGone when the container was removed or
// stopped, before or while the script ran, and env.ErrUnavailable when the
// engine cannot be reached.
func (t *Transport) Exec(ctx context.Context, script string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	errHead := &headWriter{w: stderr, max: 4096}
	outHead := &headWriter{w: stdout, max: 4096}
	stdout, stderr = outHead, errHead
	created, err := t.cli.ExecCreate(ctx, t.id, client.ExecCreateOptions{
		User:         t.user,
		AttachStdin:  stdin != nil,
		AttachStdout: true,
		AttachStderr: true,
		Cmd:          []string{"/bin/sh", "-c", script},
	})
	if err != nil {
		return 0, t.execFailed(ctx, "exec", err)
	}
	att, err := t.cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return 0, t.execFailed(ctx, "exec attach", err)
	}
	// The hijacked connection outlives ctx unless closed: closing it is the
	// only way to abandon a script that is still running.
	stopClosing := context.AfterFunc(ctx, func() { att.Close() })
	defer stopClosing()
	defer att.Close()

	stdinDone := make(chan error, 1)
	if stdin != nil {
		go func() {
			_, err := io.Copy(att.Conn, stdin)
			if cerr := att.CloseWrite(); err == nil {
				err = cerr
			}
			stdinDone <- err
		}()
	} else {
		stdinDone <- nil
	}

	_, copyErr := stdcopy.StdCopy(stdout, stderr, att.Reader)
	// A script that exits without reading all its stdin ends the stream
	// while the copy may still be writing: closing the connection unblocks
	// it, and its error no longer matters.
	att.Close()
	<-stdinDone

	if ctx.Err() != nil {
		return 0, fmt.Errorf("docker: exec in %s: %w", t.name, ctx.Err())
	}
	if copyErr != nil {
		return 0, t.lostStream(ctx, copyErr)
	}
	code, err := t.exitCode(ctx, created.ID)
	if err != nil {
		return 0, err
	}
	// A shell that could not fork (the container's pids limit is exhausted,
	// say by a fork bomb) did not run the script: its result means nothing,
	// and a retry may well succeed.
	if code != 0 && forkFailed(errHead.head.Bytes()) {
		return 0, fmt.Errorf("docker: exec in %s: cannot fork (pids limit reached?): %.200s: %w",
			t.name, bytes.TrimSpace(errHead.head.Bytes()), env.ErrUnavailable)
	}
	// When the runtime could not start the script at all (the container is
	// stopping, or out of pids), the exec ends with 126 and the runtime's
	// complaint as output: there is no script result.
	if code == 126 {
		if msg, ok := runtimeExecFailed(outHead.head.Bytes(), errHead.head.Bytes()); ok {
			if strings.Contains(msg, "stopped") {
				return 0, fmt.Errorf("docker: container %s is stopping (%s): %w", t.name, msg, env.ErrSandboxGone)
			}
			if err := t.checkRunning(ctx); err != nil {
				return 0, err
			}
			return 0, fmt.Errorf("docker: exec in %s: the runtime could not start the script (%.200s): %w", t.name, msg, env.ErrUnavailable)
		}
	}
	// A script killed because its container is stopping looks like one
	// ended by SIGKILL, and an exec started while it stops fails with 126
	// and the runtime's complaint as output. The engine's container state
	// lags behind, so a probe decides: no exec succeeds once the container's
	// init has died, which is what killed the script.
	if code == 126 || code >= 128 || code < 0 {
		if err := t.checkRunning(ctx); err != nil {
			return 0, err
		}
		if err := t.probe(ctx); err != nil {
			return 0, err
		}
	}
	return code, nil
}

// OpenShell implements nohup.ShellTransport: an exec of /bin/sh -c script
// with stdin attached, whose hijacked connection stays open for as long as
// the engine keeps the shell. The engine's multiplexed output is split
// into stdout and stderr on the way. Stop closes the connection: the shell
// reads end of file and exits, and blocked reads return.
func (t *Transport) OpenShell(ctx context.Context, script string) (*nohup.Shell, error) {
	created, err := t.cli.ExecCreate(ctx, t.id, client.ExecCreateOptions{
		User:         t.user,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		Cmd:          []string{"/bin/sh", "-c", script},
	})
	if err != nil {
		return nil, t.goneWhy(ctx, sandboxError("exec resident shell", t.name, err))
	}
	att, err := t.cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, t.goneWhy(ctx, sandboxError("attach resident shell", t.name, err))
	}
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(outW, errW, att.Reader)
		if err == nil {
			err = io.EOF
		}
		outW.CloseWithError(err)
		errW.CloseWithError(err)
	}()
	stop := sync.OnceValue(func() error {
		att.Close()
		// The demultiplexer may be blocked writing a frame nobody will
		// read: closing the read ends releases it.
		outR.Close()
		errR.Close()
		return nil
	})
	return &nohup.Shell{Stdin: att.Conn, Stdout: outR, Stderr: errR, Stop: stop}, nil
}

// execFailed classifies an exec the engine refused. Besides the answers
// sandboxError knows, the engine fails an attach with a bare 500 ("unable
// to upgrade to tcp") while the container is being stopped: its state
// decides whether the sandbox is gone; otherwise the failure is treated
// as passing (ErrUnavailable), so the engine retries and a container that
// is stopping is reported gone on the next try.
func (t *Transport) execFailed(ctx context.Context, op string, err error) error {
	classified := sandboxError(op, t.name, err)
	if ctx.Err() != nil || errors.Is(classified, env.ErrSandboxGone) || errors.Is(classified, env.ErrUnavailable) {
		return t.goneWhy(ctx, classified)
	}
	if gone := t.checkRunning(ctx); gone != nil {
		return gone
	}
	if perr := t.probe(ctx); errors.Is(perr, env.ErrSandboxGone) {
		return perr
	}
	return fmt.Errorf("%w: %w", classified, env.ErrUnavailable)
}

// settle classifies a probe the engine refused without saying why (a bare
// 500 while the container stops). The probe is what decides whether the
// container still runs processes, so its failure is taken seriously: the
// engine's container state, which lags behind a stop, gets up to two
// seconds to catch up before the failure is called passing.
func (t *Transport) settle(ctx context.Context, op string, err error) error {
	classified := sandboxError(op, t.name, err)
	if ctx.Err() != nil || errors.Is(classified, env.ErrSandboxGone) || errors.Is(classified, env.ErrUnavailable) {
		return t.goneWhy(ctx, classified)
	}
	delay := 20 * time.Millisecond
	deadline := time.Now().Add(2 * time.Second)
	for {
		if gone := t.checkRunning(ctx); gone != nil {
			return gone
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %w", classified, env.ErrUnavailable)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("docker: %s in %s: %w", op, t.name, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// probe runs a trivial exec whose success is unambiguous: an echo of a
// nonce. It returns nil when the container runs processes normally.
func (t *Transport) probe(ctx context.Context) error {
	nonce := fmt.Sprintf("corral-probe-%d", time.Now().UnixNano())
	created, err := t.cli.ExecCreate(ctx, t.id, client.ExecCreateOptions{
		User:         t.user,
		AttachStdout: true,
		AttachStderr: true,
		Cmd:          []string{"/bin/sh", "-c", "echo " + nonce},
	})
	if err != nil {
		return t.settle(ctx, "exec probe", err)
	}
	att, err := t.cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return t.settle(ctx, "exec probe", err)
	}
	defer att.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, io.LimitReader(att.Reader, 4096)); err != nil {
		return t.lostStream(ctx, err)
	}
	code, err := t.exitCode(ctx, created.ID)
	if err != nil {
		return err
	}
	got := strings.TrimSpace(out.String())
	if code == 0 && got == nonce {
		return nil
	}
	// The runtime says why it could not exec: a stopping container, or one
	// that cannot start a process right now (its pids limit is exhausted by
	// a fork bomb), which is not gone at all.
	if strings.Contains(got, "stopped") {
		return fmt.Errorf("docker: container %s is stopping (%s): %w", t.name, got, env.ErrSandboxGone)
	}
	if err := t.checkRunning(ctx); err != nil {
		return err
	}
	return fmt.Errorf("docker: container %s cannot run processes right now (exit %d: %.200s): %w", t.name, code, got, env.ErrUnavailable)
}

// lostStream classifies a stream that broke before the script's end.
func (t *Transport) lostStream(ctx context.Context, copyErr error) error {
	if err := t.checkRunning(ctx); err != nil {
		return err
	}
	return sandboxError("exec output", t.name, fmt.Errorf("%w: %w", env.ErrUnavailable, copyErr))
}

// exitCode waits for the engine to record the exec's end. The output stream
// closes when the process exits, but the engine may update the exec's state
// a moment later; and when the container died under it, the exec may be
// reported running forever, which only the container's state reveals.
func (t *Transport) exitCode(ctx context.Context, execID string) (int, error) {
	delay := time.Millisecond
	for attempt := 0; ; attempt++ {
		res, err := t.cli.ExecInspect(ctx, execID, client.ExecInspectOptions{})
		if err != nil {
			if gone := t.checkRunning(ctx); gone != nil {
				return 0, gone
			}
			return 0, sandboxError("exec inspect", t.name, err)
		}
		if !res.Running {
			return res.ExitCode, nil
		}
		if attempt == 10 {
			if err := t.checkRunning(ctx); err != nil {
				return 0, err
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("docker: exec in %s: %w", t.name, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(delay*2, 100*time.Millisecond)
	}
}

// checkRunning returns an error matching env.ErrSandboxGone when the
// container no longer runs, env.ErrUnavailable when the engine cannot say,
// and nil when it runs.
func (t *Transport) checkRunning(ctx context.Context) error {
	res, err := t.cli.ContainerInspect(ctx, t.id, client.ContainerInspectOptions{})
	if err != nil {
		return sandboxError("inspect", t.name, err)
	}
	if st := res.Container.State; st == nil || !st.Running || st.Restarting {
		status := "unknown"
		if st != nil {
			status = string(st.Status) + oomWords(st)
		}
		return fmt.Errorf("docker: container %s is %s: %w", t.name, status, env.ErrSandboxGone)
	}
	return nil
}

// goneWhy returns gone, an error the engine's refusal of an exec made,
// or, when it means the sandbox is gone, what the container's state says
// instead: that it was removed, or how it stopped, which is why when the
// OOM killer ended its main process (see oomWords). One inspect, on the
// way out only.
func (t *Transport) goneWhy(ctx context.Context, gone error) error {
	if ctx.Err() != nil || !errors.Is(gone, env.ErrSandboxGone) {
		return gone
	}
	if err := t.checkRunning(ctx); errors.Is(err, env.ErrSandboxGone) {
		return err
	}
	return gone
}

// oomWords says, for a stopped container whose main process the kernel's
// OOM killer ended (docker sets OOMKilled once the container stopped after
// an OOM kill in it), why it stopped; "" otherwise. The processes corral
// ran there are lost with it.
func oomWords(st *container.State) string {
	if !st.OOMKilled {
		return ""
	}
	return ": its main process ran out of memory (docker reports it OOM-killed); raise the container's memory limit"
}

// headWriter passes everything to w and keeps the first max bytes.
type headWriter struct {
	w    io.Writer
	max  int
	head bytes.Buffer
}

func (h *headWriter) Write(p []byte) (int, error) {
	if room := h.max - h.head.Len(); room > 0 {
		h.head.Write(p[:min(room, len(p))])
	}
	return h.w.Write(p)
}

// forkFailed reports whether a shell's error output says it could not
// fork: busybox ash "can't fork", dash "Cannot fork", bash "fork: ...
// Resource temporarily unavailable".
func forkFailed(stderr []byte) bool { return nohup.ForkFailed(stderr) }

// runtimeExecFailed recognises the OCI runtime's complaint that replaces
// the output of an exec it could not start ("OCI runtime exec failed: …",
// "cannot exec in a stopped state: unknown").
func runtimeExecFailed(stdout, stderr []byte) (string, bool) {
	for _, b := range [][]byte{stdout, stderr} {
		msg := strings.TrimSpace(string(b))
		if strings.Contains(msg, "OCI runtime exec failed") || strings.Contains(msg, "cannot exec in a stopped state") {
			return msg, true
		}
	}
	return "", false
}

// Health implements env.HealthChecker by asking the engine about the
// container (one inspect, nothing run inside it): paused, stopped or
// removed, or an engine that does not answer within ctx. A paused
// container is what makes every call into it hang: the engine refuses new
// execs, and the resident shells and follows already open are frozen.
func (t *Transport) Health(ctx context.Context) env.Health {
	res, err := t.cli.ContainerInspect(ctx, t.id, client.ContainerInspectOptions{})
	switch {
	case err == nil:
	case cerrdefs.IsNotFound(err):
		return env.Health{Condition: env.ConditionGone, Detail: fmt.Sprintf("container %s was removed", t.name)}
	case ctx.Err() != nil:
		return env.Health{Condition: env.ConditionUnreachable, Detail: "the Docker Engine did not answer in time"}
	default:
		return env.Health{Condition: env.ConditionUnreachable, Detail: fmt.Sprintf("the Docker Engine cannot be asked about container %s: %.160v", t.name, err)}
	}
	switch st := res.Container.State; {
	case st == nil:
		return env.Health{Condition: env.ConditionUnreachable, Detail: fmt.Sprintf("the Docker Engine reports no state for container %s", t.name)}
	case st.Paused:
		return env.Health{Condition: env.ConditionPaused, Detail: fmt.Sprintf("container %s is paused: docker unpause %s", t.name, t.name)}
	case !st.Running || st.Restarting:
		return env.Health{Condition: env.ConditionGone, Detail: fmt.Sprintf("container %s is %s", t.name, st.Status)}
	}
	return env.Health{Condition: env.ConditionOK}
}

var _ env.HealthChecker = (*Transport)(nil)
