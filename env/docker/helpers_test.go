package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"
)

// testImage is built by scripts/build-test-image.sh.
const testImage = "corral-test-busybox:latest"

var (
	engineOnce sync.Once
	engineErr  error
)

// requireEngine returns a client for the local engine with the test image
// present. Without an engine the test is skipped with the reason, unless
// CORRAL_REQUIRE_DOCKER=1, when it fails.
func requireEngine(t testing.TB) *client.Client {
	t.Helper()
	engineOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cli, err := connect(ctx, "")
		if err != nil {
			engineErr = err
			return
		}
		defer cli.Close()
		if _, err := cli.ImageInspect(ctx, testImage); err == nil {
			return
		}
		_, file, _, _ := runtime.Caller(0)
		script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "build-test-image.sh")
		out, err := exec.CommandContext(ctx, "bash", script).CombinedOutput()
		if err != nil {
			engineErr = &buildError{out: string(out), err: err}
		}
	})
	if engineErr != nil {
		if os.Getenv("CORRAL_REQUIRE_DOCKER") == "1" {
			require.FailNow(t, fmt.Sprintf("docker engine required (CORRAL_REQUIRE_DOCKER=1): %v", engineErr))
		}
		t.Skipf("no usable docker engine (set CORRAL_REQUIRE_DOCKER=1 to fail instead): %v", engineErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli, err := connect(ctx, "")
	require.NoError(t, err, "connect")
	t.Cleanup(func() { cli.Close() })
	return cli
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return "build test image: " + e.err.Error() + "\n" + e.out }

// randomSuffix makes names and process-table markers unique to one test run,
// so concurrent runs on the machine never touch each other's things.
func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// startPlainContainer starts a container from the test image that is NOT a
// corral sandbox (as a user's own container would be) and removes it when
// the test ends.
func startPlainContainer(t testing.TB, cli *client.Client) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := "corral-test-" + randomSuffix()
	init := true
	_, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: name,
		Config: &container.Config{
			Image:  testImage,
			Cmd:    []string{"/bin/sh", "-c", keepAlive},
			Labels: map[string]string{"dev.corral.test": "true"},
		},
		HostConfig: &container.HostConfig{Init: &init},
	})
	require.NoError(t, err, "create container")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true})
	})
	if _, err := cli.ContainerStart(ctx, name, client.ContainerStartOptions{}); err != nil {
		require.FailNow(t, fmt.Sprintf("start container: %v", err))
	}
	return name
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
