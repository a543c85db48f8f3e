package docker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

func TestTransportExitCodeAndStreams(t *testing.T) {
	cli := requireEngine(t)
	name := startPlainContainer(t, cli)
	tr := NewTransport(cli, name, "")
	ctx := testContext(t)

	var stdout, stderr bytes.Buffer
	code, err := tr.Exec(ctx, `echo out; echo err >&2; exit 7`, nil, &stdout, &stderr)
	require.NoError(t, err, "Exec")
	assert.Truef(t, code == 7, "exit code = %d, want 7", code)
	if stdout.String() != "out\n" || stderr.String() != "err\n" {
		assert.Fail(t, fmt.Sprintf("stdout %q stderr %q, want demultiplexed \"out\\n\" and \"err\\n\"", stdout.String(), stderr.String()))
	}

	// nil writers discard; the code still arrives.
	code, err = tr.Exec(ctx, `echo discarded; exit 0`, nil, nil, nil)
	require.Truef(t, err == nil && code == 0, "Exec with nil writers = %d, %v", code, err)
}

func TestTransportStdin(t *testing.T) {
	cli := requireEngine(t)
	name := startPlainContainer(t, cli)
	tr := NewTransport(cli, name, "")
	ctx := testContext(t)

	// Binary stdin, bigger than any pipe buffer, must arrive intact and end
	// with EOF (or `wc` would never finish).
	in := make([]byte, 3<<20)
	for i := range in {
		in[i] = byte(i * 7)
	}
	var out bytes.Buffer
	code, err := tr.Exec(ctx, `wc -c`, bytes.NewReader(in), &out, nil)
	require.Truef(t, err == nil && code == 0, "Exec: %d, %v", code, err)
	got := strings.TrimSpace(out.String())
	assert.Truef(t, got == fmt.Sprint(len(in)), "script read %s bytes of stdin, want %d", got, len(in))

	// A script that ignores its stdin must not make Exec hang.
	code, err = tr.Exec(ctx, `exit 3`, bytes.NewReader(in), io.Discard, nil)
	require.Truef(t, err == nil && code == 3, "Exec ignoring stdin: %d, %v", code, err)
}

func TestTransportLargeBinaryOutput(t *testing.T) {
	cli := requireEngine(t)
	name := startPlainContainer(t, cli)
	tr := NewTransport(cli, name, "")
	ctx := testContext(t)

	var out bytes.Buffer
	code, err := tr.Exec(ctx, `dd if=/dev/urandom bs=1M count=8 2>/dev/null | tee /tmp/blob; `, nil, &out, nil)
	require.Truef(t, err == nil && code == 0, "Exec: %d, %v", code, err)
	var sum bytes.Buffer
	if _, err := tr.Exec(ctx, `sha256sum /tmp/blob | cut -d' ' -f1`, nil, &sum, nil); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	if got := fmt.Sprintf("%x", sha256.Sum256(out.Bytes())); got != strings.TrimSpace(sum.String()) {
		assert.Fail(t, fmt.Sprintf("output (%d bytes) sha256 %s, file in container %s", out.Len(), got, sum.String()))
	}
}

func TestTransportContainerGone(t *testing.T) {
	cli := requireEngine(t)
	ctx := testContext(t)

	t.Run("removed", func(t *testing.T) {
		name := startPlainContainer(t, cli)
		if _, err := cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true}); err != nil {
			require.FailNow(t, fmt.Sprint(err))
		}
		_, err := NewTransport(cli, name, "").Exec(ctx, "true", nil, nil, nil)
		require.Truef(t, errors.Is(err, env.ErrSandboxGone) && strings.Contains(err.Error(), name), "Exec in removed container: %v, want ErrSandboxGone naming %s", err, name)
	})
	t.Run("stopped", func(t *testing.T) {
		name := startPlainContainer(t, cli)
		timeout := 5
		if _, err := cli.ContainerStop(ctx, name, client.ContainerStopOptions{Timeout: &timeout}); err != nil {
			require.FailNow(t, fmt.Sprint(err))
		}
		_, err := NewTransport(cli, name, "").Exec(ctx, "true", nil, nil, nil)
		require.Truef(t, errors.Is(err, env.ErrSandboxGone) && strings.Contains(err.Error(), name), "Exec in stopped container: %v, want ErrSandboxGone naming %s", err, name)
	})
	t.Run("stopped while running", func(t *testing.T) {
		name := startPlainContainer(t, cli)
		tr := NewTransport(cli, name, "")
		marker := "ready-" + randomSuffix()
		pr, pw := io.Pipe()
		defer pr.Close()
		result := make(chan error, 1)
		go func() {
			_, err := tr.Exec(ctx, "echo "+marker+"; exec sleep 300", nil, pw, nil)
			pw.CloseWithError(err)
			result <- err
		}()
		waitForLine(t, pr, marker)
		go func() { _, _ = io.Copy(io.Discard, pr) }()
		timeout := 1
		if _, err := cli.ContainerStop(ctx, name, client.ContainerStopOptions{Timeout: &timeout}); err != nil {
			require.FailNow(t, fmt.Sprint(err))
		}
		select {
		case err := <-result:
			require.Truef(t, errors.Is(err, env.ErrSandboxGone), "Exec whose container stopped: %v, want ErrSandboxGone", err)
		case <-ctx.Done():
			require.FailNow(t, "Exec did not return after its container stopped")
		}
	})
}

func TestTransportCancel(t *testing.T) {
	cli := requireEngine(t)
	name := startPlainContainer(t, cli)
	tr := NewTransport(cli, name, "")

	ctx, cancel := context.WithCancel(testContext(t))
	marker := "ready-" + randomSuffix()
	pr, pw := io.Pipe()
	defer pr.Close()
	result := make(chan error, 1)
	go func() {
		_, err := tr.Exec(ctx, "echo "+marker+"; sleep 300", nil, pw, nil)
		pw.CloseWithError(err)
		result <- err
	}()
	waitForLine(t, pr, marker)
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	cancel()
	select {
	case err := <-result:
		require.Truef(t, errors.Is(err, context.Canceled), "cancelled Exec returned %v, want context.Canceled", err)
	case <-time.After(time.Minute):
		require.FailNow(t, "Exec did not return after its context was cancelled")
	}
	// The abandoned script keeps running in the container; kill it so the
	// container's removal is quick.
	_, _ = tr.Exec(testContext(t), "pkill -f 'sleep 300' || killall sleep", nil, nil, nil)
}

func TestConnectUnreachable(t *testing.T) {
	ctx := testContext(t)
	_, err := connect(ctx, "unix:///nonexistent/corral-test.sock")
	require.Truef(t, errors.Is(err, env.ErrUnavailable), "connect to a missing socket: %v, want ErrUnavailable", err)
	assert.Truef(t, strings.Contains(err.Error(), "/nonexistent/corral-test.sock"), "error %q does not name the engine address", err)
}

// waitForLine reads r until a line equal to want arrives.
func waitForLine(t *testing.T, r io.Reader, want string) {
	t.Helper()
	var buf []byte
	chunk := make([]byte, 4096)
	for {
		n, err := r.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if bytes.Contains(buf, []byte(want+"\n")) {
			return
		}
		require.NoErrorf(t, err, "stream ended before %q: %v (got %q)", want, err, buf)
	}
}

func TestForkFailed(t *testing.T) {
	for _, msg := range []string{
		"/bin/sh: can't fork: Resource temporarily unavailable\n", // busybox ash
		"sh: 1: Cannot fork\n", // dash
		"bash: fork: retry: Resource temporarily unavailable\n",
		"bash: fork: Resource temporarily unavailable\n",
	} {
		assert.Truef(t, forkFailed([]byte(msg)), "forkFailed(%q) = false", msg)
	}
	for _, msg := range []string{"", "tail: can't open 'x': No such file or directory\n", "forked 3 children\n"} {
		assert.Falsef(t, forkFailed([]byte(msg)), "forkFailed(%q) = true", msg)
	}
	var sink bytes.Buffer
	h := &headWriter{w: &sink, max: 4}
	_, _ = h.Write([]byte("abc"))
	_, _ = h.Write([]byte("defg"))
	if h.head.String() != "abcd" || sink.String() != "abcdefg" {
		assert.Fail(t, fmt.Sprintf("headWriter kept %q, passed %q", h.head.String(), sink.String()))
	}
}

func TestRuntimeExecFailed(t *testing.T) {
	if msg, ok := runtimeExecFailed([]byte("cannot exec in a stopped state: unknown\r\n"), nil); !ok || msg != "cannot exec in a stopped state: unknown" {
		assert.Fail(t, fmt.Sprintf("stopped-state complaint not recognised: %q %v", msg, ok))
	}
	if _, ok := runtimeExecFailed(nil, []byte("OCI runtime exec failed: exec failed: unable to start container process: read init-p: connection reset by peer: unknown\n")); !ok {
		assert.Fail(t, "OCI complaint on stderr not recognised")
	}
	_, ok := runtimeExecFailed([]byte("sh: x: Permission denied\n"), nil)
	assert.False(t, ok, "an ordinary 126 taken for a runtime failure")
}
