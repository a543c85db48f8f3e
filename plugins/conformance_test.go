package plugins_test

import (
	"context"
	"testing"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
	"github.com/corralhq/corral/plugins"
)

func testOptions() plugins.Options {
	return plugins.Options{Dirs: []string{pluginDir}}
}

func openPlugin(t testing.TB, target string) env.Environment {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := plugins.Open(ctx, target, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestConformanceLocalPlugin runs the shared suite through the plugin
// boundary against env/local re-hosted in a plugin, pipes and PTY.
func TestConformanceLocalPlugin(t *testing.T) {
	target := "localplugin://?state=" + t.TempDir()
	envtest.Run(t, envtest.Config{
		New: func(t *testing.T) env.Environment { return openPlugin(t, target) },
		PTY: true,
	})
}
