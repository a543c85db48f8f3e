package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
	"github.com/corralhq/corral/registry"
)

// TestLimitsOnTheWire: limits given to start and run reach the backend
// and come back in Info; a backend that cannot enforce one refuses the
// start with its reason, as a 400 "unsupported" (never a 500) that the
// client matches to env.ErrUnsupported, and nothing is registered.
func TestLimitsOnTheWire(t *testing.T) {
	limited := &envtest.Fake{Caps: env.Capabilities{Limits: []string{env.LimitMemory, env.LimitCPUs, env.LimitPids}}}
	plain := &envtest.Fake{Caps: env.Capabilities{LimitsNote: "no cgroup here: use a docker-image backend"}}
	c, paths := startDaemonWith(t, func(cfg *Config) {
		cfg.Open = func(ctx context.Context, target string) (env.Environment, error) {
			switch target {
			case "limited":
				return limited, nil
			case "plain":
				return plain, nil
			}
			return nil, fmt.Errorf("unknown backend %q", target)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	lim := env.Limits{Memory: 100 << 20, CPUs: 1.5, Pids: 512}

	in, err := c.Start(ctx, registry.StartOptions{Backend: "limited", Command: "serve", Limits: &lim})
	require.NoError(t, err)
	require.NotNil(t, in.Limits)
	assert.Equal(t, lim, *in.Limits)
	require.NotNil(t, limited.Last().Spec().Limits, "the backend got the limits")
	assert.Equal(t, lim, *limited.Last().Spec().Limits)
	got, err := c.Get(ctx, in.ID)
	require.NoError(t, err)
	require.NotNil(t, got.Limits)
	assert.Equal(t, lim, *got.Limits)
	limited.Last().Exit(env.Exited(0))

	// The wire form: bytes, cores, tasks.
	status, body := raw(t, paths.Socket, http.MethodPost, "/processes",
		`{"backend": "limited", "command": "serve", "limits": {"memory": 209715200, "cpus": 0.5, "pids": 64}}`)
	require.Equal(t, http.StatusCreated, status, "%s", body)
	var wire map[string]any
	require.NoError(t, json.Unmarshal(body, &wire))
	assert.Equal(t, map[string]any{"memory": float64(200 << 20), "cpus": 0.5, "pids": float64(64)}, wire["limits"])
	limited.Last().Exit(env.Exited(0))

	// A run carries them too.
	limited.OnStart = func(p *envtest.FakeProcess) error {
		go p.Exit(env.Exited(0))
		return nil
	}
	res, err := c.Run(ctx, registry.RunOptions{StartOptions: registry.StartOptions{Backend: "limited", Command: "build", Limits: &env.Limits{Pids: 100}}})
	require.NoError(t, err)
	require.NotNil(t, res.Info.Limits)
	assert.Equal(t, env.Limits{Pids: 100}, *res.Info.Limits)

	// Refused: start and run, with the backend's reason and no process.
	_, err = c.Start(ctx, registry.StartOptions{Backend: "plain", Command: "serve", Limits: &env.Limits{Memory: 100 << 20}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "plain cannot enforce --memory: no cgroup here: use a docker-image backend")
	assert.ErrorIs(t, err, env.ErrUnsupported)
	var ae *APIError
	require.True(t, errors.As(err, &ae), "%T", err)
	assert.Equal(t, http.StatusBadRequest, ae.Status)
	assert.Equal(t, CodeUnsupported, ae.Code)

	res, err = c.Run(ctx, registry.RunOptions{StartOptions: registry.StartOptions{Backend: "plain", Command: "build", Limits: &env.Limits{CPUs: 2, Pids: 50}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "plain cannot enforce --cpus, --pids")
	assert.ErrorIs(t, err, env.ErrUnsupported)
	assert.Empty(t, res.ID)

	status, body = raw(t, paths.Socket, http.MethodPost, "/processes", `{"backend": "plain", "command": "serve", "limits": {"memory": 104857600}}`)
	assert.Equal(t, http.StatusBadRequest, status, "%s", body)
	assert.Contains(t, string(body), `"code":"unsupported"`)
	assert.Empty(t, plain.Procs(), "nothing started on the backend that refused")
	list, err := c.List(ctx, registry.ListOptions{All: true, Backend: "plain"})
	require.NoError(t, err)
	assert.Empty(t, list, "nothing registered")
}
