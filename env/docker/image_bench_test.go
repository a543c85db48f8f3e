package docker

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"
)

// BenchmarkImageSandbox compares a one-shot sandbox through corral (Open
// of a docker-image:// target, a foreground `true`, Close: what
// `corral run --target docker-image://IMAGE true` waits for) with
// `docker run --rm IMAGE true` by the docker CLI. Both make a fresh
// container per iteration, as `docker run` does.
//
// Close returns while the engine deletes the container, which
// `docker run --rm` waits for. That deletion is timed apart, from Close's
// return until WaitRemoved sees it done (remove-ms), and waited for
// before the next iteration, so that it does not slow the next sandbox's
// start unseen; the benchmark fails when a container is left.
func BenchmarkImageSandbox(b *testing.B) {
	cli := requireEngine(b)
	b.Run("corral", func(b *testing.B) {
		owner := "bench-" + randomSuffix()
		ctx := context.Background()
		opts := Options{Owner: owner, Residents: benchResidents(), Logger: discardLogger()}
		var removed []time.Duration
		for b.Loop() {
			runImageSandboxOnce(b, ctx, SchemeImage+testImage+"?name=corral-bench-"+randomSuffix(), opts)
			b.StopTimer()
			t0 := time.Now()
			require.NoError(b, WaitRemoved(ctx))
			removed = append(removed, time.Since(t0))
			b.StartTimer()
		}
		requireNoSandboxes(b, cli, owner)
		slices.Sort(removed)
		b.ReportMetric(float64(removed[len(removed)/2])/float64(time.Millisecond), "remove-ms")
	})
	b.Run("baseline", func(b *testing.B) {
		if _, err := exec.LookPath("docker"); err != nil {
			b.Skip("no docker CLI")
		}
		for b.Loop() {
			if out, err := exec.Command("docker", "run", "--rm", testImage, "true").CombinedOutput(); err != nil {
				require.FailNow(b, fmt.Sprintf("docker run: %v\n%s", err, out))
			}
		}
	})
}

// runImageSandboxOnce is what `corral run --target docker-image://…
// true` asks of the backend.
func runImageSandboxOnce(b *testing.B, ctx context.Context, target string, opts Options) {
	e, err := Open(ctx, target, opts)
	require.NoError(b, err)
	runTrue(b, ctx, e)
	require.NoError(b, e.Close())
}

// requireNoSandboxes fails when a container of owner is left.
func requireNoSandboxes(b *testing.B, cli *client.Client, owner string) {
	b.Helper()
	ctx := context.Background()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", LabelOwner+"="+owner)})
	require.NoError(b, err)
	if len(list.Items) > 0 {
		require.FailNow(b, fmt.Sprintf("%d sandboxes left after Close, first %v", len(list.Items), list.Items[0].Names))
	}
}
