package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
)

// TestConformance runs the env conformance suite in sandboxes created from
// the test image with the hardened defaults. The cases of one group share a
// sandbox (as processes of many callers share one container), and each load
// case has its own, so that its hundred processes meet the pids limit
// alone: a container per case made the suite three quarters of the
// package's CI time. A sandbox is kept on Close so that re-attach finds it,
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
		// A hang detector, not a speed check: a hundred concurrent starts
		// queue at the engine, and on a loaded 2-core machine they took
		// longer than the default 90 s.
		Timeout: 4 * time.Minute,
		New: func(t *testing.T) env.Environment {
			sum := sha256.Sum256([]byte(sandboxKey(t.Name())))
			name := owner + "-" + hex.EncodeToString(sum[:5])
			mu.Lock()
			names[name] = true
			mu.Unlock()
			e, err := Open(testContext(t), "docker-image://"+testImage+"?persist=true&name="+name, Options{Owner: owner, Logger: discardLogger(), Residents: residents})
			require.NoError(t, err, "Open")
			return e
		},
		PTY: true,
	})
}

// sandboxKey maps a case's test name (TestConformance/MODE/GROUP/CASE) to
// the sandbox it runs in: one per mode and group, one per load case.
func sandboxKey(name string) string {
	parts := strings.SplitN(name, "/", 4)
	if len(parts) < 4 || envtest.IsLoadCase(parts[2]+"/"+parts[3]) {
		return name
	}
	return strings.Join(parts[:3], "/")
}
