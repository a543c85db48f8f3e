package registrytest_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
	"github.com/corralhq/corral/registry"
	"github.com/corralhq/corral/registry/registrytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The suite in process, on the real local backend. daemon's tests run it
// through the daemon.
func TestInProcess(t *testing.T) {
	stateDir := t.TempDir()
	r, err := registry.New(registry.Config{
		Open: func(ctx context.Context, target string) (env.Environment, error) {
			if target != "local" {
				return nil, fmt.Errorf("unknown backend %q", target)
			}
			return local.New(local.Options{StateDir: stateDir, Logger: slog.New(slog.DiscardHandler)})
		},
		DefaultGrace: time.Second,
		Logger:       slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close()) })
	registrytest.Run(t, r)
}
