package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
)

// TestConformance runs the env conformance suite in sandboxes created from
// the test image with the hardened defaults. Each subtest gets its own
// sandbox (its two Environments in the re-attach cases share it, being
// opened with the same target), kept on Close so that re-attach finds it,
// and removed when the suite ends.
func TestConformance(t *testing.T) {
	t.Run("residents", func(t *testing.T) { conformance(t, 0) })
	t.Run("no-residents", func(t *testing.T) { conformance(t, -1) })
}

// conformance runs the suite with the Environment's resident shells as
// Options.Residents says: on (every call but Write on a resident), or off
// (every call an exec).
func conformance(t *testing.T, residents int) {
	cli := requireEngine(t)
	owner := "test-conformance-" + randomSuffix()
	var mu sync.Mutex
	names := map[string]bool{}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for name := range names {
			_, _ = cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true})
		}
	})
	var skip map[string]string
	if residents < 0 {
		skip = envtest.TransportSkip()
	}
	envtest.Run(t, envtest.Config{
		Skip: skip,
		New: func(t *testing.T) env.Environment {
			sum := sha256.Sum256([]byte(t.Name()))
			name := owner + "-" + hex.EncodeToString(sum[:5])
			mu.Lock()
			names[name] = true
			mu.Unlock()
			e, err := Open(testContext(t), "docker-image://"+testImage+"?persist=true&name="+name, Options{Owner: owner, Logger: discardLogger(), Residents: residents})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			return e
		},
		PTY: true,
	})
}
