//go:build linux

package registry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/docker"
)

// recoverDockerProcs is how many running processes in one container the
// docker recovery benchmark re-attaches: the target is 100 in at
// most 2 s.
const recoverDockerProcs = 100

// BenchmarkRecoverDocker is a restart of a registry whose state file lists
// recoverDockerProcs processes running in one container: New, StartRecover
// and the wait until none is recovering any more (every process re-attached
// and running). corral: the 100 processes; baseline: the same restart with
// one process, the cost of opening the container's environment and one
// Attach, which a recovery that re-attaches in parallel approaches. The
// docker-exec-100-ms metric is what 100 concurrent `docker exec C true`
// cost on the same machine at that moment: a recovery with one exec per
// process could not beat it.
func BenchmarkRecoverDocker(b *testing.B) {
	cli, name := benchContainer(b)
	target := docker.SchemeContainer + name
	open := func(ctx context.Context, t string) (env.Environment, error) {
		return docker.Open(ctx, t, docker.Options{Logger: slog.New(slog.DiscardHandler)})
	}
	run := func(b *testing.B, n int) {
		stateFile := filepath.Join(b.TempDir(), "state.json")
		cfg := Config{Open: open, Logger: slog.New(slog.DiscardHandler), StateFile: stateFile, DefaultBackend: target, MaxProcesses: 2 * n}
		r1, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if _, err := r1.Recover(ctx); err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for i := range n {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				if _, err := r1.Start(ctx, StartOptions{Command: fmt.Sprintf("sleep 3600; : bench-%d", i)}); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		if b.Failed() {
			b.FailNow()
		}
		r1.Close() // the docker environment is not closed by the daemon either: processes keep running
		defer func() {
			r, err := New(cfg)
			if err == nil {
				r.Recover(ctx)
				r.KillAll(ctx, KillAllOptions{Signal: env.SIGKILL})
				r.Close()
			}
		}()
		b.ResetTimer()
		for b.Loop() {
			r2, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			rc, err := r2.StartRecover(ctx)
			if err != nil {
				b.Fatal(err)
			}
			rep, err := rc.Wait(ctx)
			b.StopTimer()
			if err != nil || rep.Restored[StateRunning] != n {
				b.Fatalf("recovery = %+v, %v; want %d running", rep, err, n)
			}
			r2.Close()
			// Pacing, not a measurement: the engine tears down the execs
			// that streamed the closed registry's processes for a while
			// after Close, and the next restart must not pay for it (a
			// real restart finds no such teardown under way).
			time.Sleep(2 * time.Second)
			b.StartTimer()
		}
	}
	b.Run("corral", func(b *testing.B) {
		run(b, recoverDockerProcs)
		b.StopTimer()
		b.ReportMetric(float64(parallelExecs(b, cli, name, recoverDockerProcs))/float64(time.Millisecond), "docker-exec-100-ms")
	})
	b.Run("baseline", func(b *testing.B) { run(b, 1) })
}

// parallelExecs runs n `docker exec C true` at once and returns how long
// they took together.
func parallelExecs(b *testing.B, cli *client.Client, name string, n int) time.Duration {
	if _, err := exec.LookPath("docker"); err != nil {
		return 0
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if out, err := exec.Command("docker", "exec", name, "true").CombinedOutput(); err != nil {
				b.Errorf("docker exec: %v: %s", err, out)
			}
		})
	}
	wg.Wait()
	return time.Since(t0)
}

// benchContainer starts a busybox container for a benchmark (removed with
// it), or skips without an engine unless CORRAL_REQUIRE_DOCKER=1.
func benchContainer(b *testing.B) (*client.Client, string) { return benchContainerT(b) }

func benchContainerT(b testing.TB) (*client.Client, string) {
	b.Helper()
	cli, err := client.New(client.FromEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
		cancel()
	}
	if err != nil {
		if os.Getenv("CORRAL_REQUIRE_DOCKER") == "1" {
			b.Fatalf("docker engine required (CORRAL_REQUIRE_DOCKER=1): %v", err)
		}
		b.Skipf("no docker engine: %v", err)
	}
	b.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	name := "corral-bench-recover-" + hex.EncodeToString(suffix)
	init := true
	if _, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: name,
		Config: &container.Config{
			Image:  "corral-test-busybox:latest",
			Cmd:    []string{"/bin/sh", "-c", `trap "exit 0" TERM; while :; do sleep 3600 & wait; done`},
			Labels: map[string]string{"dev.corral.test": "true"},
		},
		HostConfig: &container.HostConfig{Init: &init},
	}); err != nil {
		b.Skipf("create container (is the test image built? bash scripts/build-test-image.sh): %v", err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true})
	})
	if _, err := cli.ContainerStart(ctx, name, client.ContainerStartOptions{}); err != nil {
		b.Fatal(err)
	}
	return cli, name
}
