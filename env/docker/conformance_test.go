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

// execOnlySkip is what the run without residents leaves out: the load
// cases, and the groups whose outcome is the engine's and the sandbox's,
// not the transport's (tree kills, signals, leftovers, re-attach, PTY).
// Without residents every call is an exec, which the kept groups (exit,
// output, stdin, spec, lifecycle) all go through; env/nohup runs the whole
// suite without residents on three shells. Running everything twice here
// cost CI about five minutes.
func execOnlySkip() map[string]string {
	keep := map[string]bool{"Exit": true, "Output": true, "Stdin": true, "Spec": true, "Lifecycle": true}
	load := map[string]bool{"Output/Large50MB": true, "Exit/KillRacesExit100": true, "Exit/ConcurrentStarts100": true}
	skip := map[string]string{}
	for _, name := range envtest.Cases() {
		group, _, _ := strings.Cut(name, "/")
		switch {
		case load[name]:
			skip[name] = "a load case: run with residents"
		case !keep[group]:
			skip[name] = "the engine's, not the transport's: run with residents, and without them in env/nohup"
		}
	}
	return skip
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
		skip = execOnlySkip()
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
