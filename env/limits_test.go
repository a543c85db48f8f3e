package env_test

import (
	"errors"
	"testing"

	"github.com/corralhq/corral/env"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseAndFormatSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		back string
	}{
		{"2G", 2 << 30, "2G"}, {"100M", 100 << 20, "100M"}, {"100m", 100 << 20, "100M"},
		{"512MiB", 512 << 20, "512M"}, {"1.5g", 3 << 29, "1.5G"}, {"65536", 64 << 10, "64K"}, {"1000", 1000, "1000"},
	} {
		n, err := env.ParseSize(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, n, tc.in)
		assert.Equal(t, tc.back, env.FormatSize(n), tc.in)
	}
	for _, bad := range []string{"", "-1", "lots", "2X", "0"} {
		_, err := env.ParseSize(bad)
		assert.Error(t, err, bad)
	}
}

func TestLimitsValidate(t *testing.T) {
	assert.NoError(t, env.Limits{}.Validate())
	assert.NoError(t, env.Limits{Memory: 100 << 20, CPUs: 1.5, Pids: 50}.Validate())
	for _, bad := range []env.Limits{{Memory: 1 << 20}, {CPUs: 0.001}, {CPUs: 2000}, {Pids: 3}} {
		err := bad.Validate()
		var se *env.SpecError
		assert.True(t, errors.As(err, &se), "%+v: %v", bad, err)
	}
	spec := env.Spec{Command: "true", Limits: &env.Limits{Pids: 1}}
	assert.ErrorIs(t, spec.Validate(), env.ErrInvalidSpec)
	assert.Equal(t, "memory 2G, cpus 1.5, pids 512", env.Limits{Memory: 2 << 30, CPUs: 1.5, Pids: 512}.String())
}

func TestCheckLimits(t *testing.T) {
	caps := env.Capabilities{Limits: []string{env.LimitMemory, env.LimitPids}, LimitsNote: "no CPU controller here"}
	assert.NoError(t, env.CheckLimits("local", caps, env.Limits{Memory: 100 << 20, Pids: 50}))
	err := env.CheckLimits("local", caps, env.Limits{Memory: 100 << 20, CPUs: 1})
	require.ErrorIs(t, err, env.ErrUnsupported)
	assert.Equal(t, "local cannot enforce --cpus: no CPU controller here", err.Error())
	err = env.CheckLimits("ssh://h", env.Capabilities{}, env.Limits{CPUs: 1, Pids: 20})
	assert.Equal(t, "ssh://h cannot enforce --cpus, --pids: this backend enforces no per-process limit", err.Error())
}
