package plugins_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	require.NoError(t, err)
	return e
}

// TestConformanceLocalPlugin runs the shared suite through the plugin
// boundary against env/local re-hosted in a plugin, pipes and PTY.
func TestConformanceLocalPlugin(t *testing.T) {
	target := "localplugin://?state=" + t.TempDir()
	envtest.Run(t, envtest.Config{
		SignalBaseline: envtest.LocalSignalBaseline,
		New:            func(t *testing.T) env.Environment { return openPlugin(t, target) },
		PTY:            true,
	})
}

func openPluginErr(ctx context.Context, target string) (env.Environment, error) {
	return plugins.Open(ctx, target, testOptions())
}

// readAll reads p's whole output from offset 0.
func readAll(t *testing.T, p env.Process) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := p.Output(ctx, 0)
	require.NoError(t, err)
	defer r.Close()
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	return string(b)
}
