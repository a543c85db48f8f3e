package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/docker"
)

// dockerTestImage is built by scripts/build-test-image.sh.
const dockerTestImage = "corral-test-busybox:latest"

var (
	dockerOnce sync.Once
	dockerErr  error
)

// requireDocker returns an engine client, with the test image built. No
// engine skips the test with the reason, or fails it when
// CORRAL_REQUIRE_DOCKER=1.
func requireDocker(t testing.TB) *client.Client {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("Docker integration tests run on Linux")
	}
	dockerOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		script := filepath.Join(filepath.Dir(file), "..", "scripts", "build-test-image.sh")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "bash", script).CombinedOutput(); err != nil {
			dockerErr = errors.New(strings.TrimSpace(string(out)) + ": " + err.Error())
		}
	})
	if dockerErr != nil {
		if os.Getenv("CORRAL_REQUIRE_DOCKER") == "1" {
			require.FailNow(t, fmt.Sprintf("docker engine required (CORRAL_REQUIRE_DOCKER=1): %v", dockerErr))
		}
		t.Skipf("no usable docker engine (set CORRAL_REQUIRE_DOCKER=1 to fail instead): %v", dockerErr)
	}
	cli, err := client.New(client.FromEnv)
	require.NoError(t, err)
	t.Cleanup(func() { cli.Close() })
	ctx := dockerCtx(t)
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		require.FailNow(t, fmt.Sprintf("ping engine: %v", err))
	}
	return cli
}

func dockerCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func uniqueName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// startUserContainer starts a container the way a user would (not a corral
// sandbox) and removes it when the test ends.
func startUserContainer(t testing.TB, cli *client.Client) string {
	t.Helper()
	return startContainer(t, cli, nil)
}

// startContainer is startUserContainer with tmpfs mounts (path: options),
// as docker run --tmpfs makes them.
func startContainer(t testing.TB, cli *client.Client, tmpfs map[string]string) string {
	t.Helper()
	ctx := dockerCtx(t)
	name := uniqueName("corral-it-")
	init := true
	_, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: name,
		Config: &container.Config{
			Image:  dockerTestImage,
			Cmd:    []string{"/bin/sh", "-c", `trap "exit 0" TERM; while :; do sleep 3600 & wait; done`},
			Labels: map[string]string{"dev.corral.test": "true"},
		},
		HostConfig: &container.HostConfig{Init: &init, Tmpfs: tmpfs},
	})
	require.NoError(t, err, "create container")
	t.Cleanup(func() { removeContainer(cli, name) })
	if _, err := cli.ContainerStart(ctx, name, client.ContainerStartOptions{}); err != nil {
		require.FailNow(t, fmt.Sprintf("start container: %v", err))
	}
	return name
}

func removeContainer(cli *client.Client, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _ = cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true})
}

// openDocker opens target and closes the Environment when the test ends.
func openDocker(t *testing.T, target string) env.Environment {
	t.Helper()
	e, err := docker.Open(dockerCtx(t), target, docker.Options{})
	require.NoErrorf(t, err, "docker.Open(%q)", target)
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			assert.Fail(t, fmt.Sprintf("Close %s: %v", e.Name(), err))
		}
	})
	return e
}

// containerOf returns the container name of a docker Environment.
func containerOf(e env.Environment) string {
	return strings.TrimPrefix(e.Name(), docker.SchemeContainer)
}

// runIn runs command through e and returns its output and status.
func runIn(t *testing.T, e env.Environment, command string) (string, env.ExitStatus) {
	t.Helper()
	ctx := dockerCtx(t)
	p, err := e.Start(ctx, env.Spec{Command: command})
	require.NoErrorf(t, err, "Start(%q)", command)
	defer p.Release()
	out := readAll(t, p, 0)
	st, err := p.Wait(ctx)
	require.NoErrorf(t, err, "Wait(%q)", command)
	return out, st
}

// readAll reads p's output from offset to its end.
func readAll(t *testing.T, p env.Process, offset int64) string {
	t.Helper()
	ctx := dockerCtx(t)
	r, err := p.Output(ctx, offset)
	require.NoError(t, err, "Output")
	defer r.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, r); err != nil {
		require.FailNow(t, fmt.Sprintf("read output: %v (got %q)", err, buf.String()))
	}
	return buf.String()
}

// waitOutput reads p's output until it contains want.
func waitOutput(t *testing.T, p env.Process, want string) {
	t.Helper()
	ctx := dockerCtx(t)
	r, err := p.Output(ctx, 0)
	require.NoError(t, err, "Output")
	defer r.Close()
	var buf []byte
	chunk := make([]byte, 4096)
	for !bytes.Contains(buf, []byte(want)) {
		n, err := r.Read(chunk)
		buf = append(buf, chunk[:n]...)
		require.Truef(t, err == nil || bytes.Contains(buf, []byte(want)), "output ended before %q: %v (got %q)", want, err, buf)
	}
}
