package secrets

import (
	"os/user"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

func TestCommandEnvironDropsWhatNoShellHolds(t *testing.T) {
	got := CommandEnviron([]string{"A=1", "BASH_FUNC_f%%=() { :; }", "GITHUB_TOKEN=x", ShimVar + "=1:/x", "1BAD=2", "B=2"}, nil)
	assert.Equal(t, []string{"A=1", "B=2"}, got)
	require.NoError(t, env.Spec{Command: "true", Environ: got}.Validate())
}

func TestAccountEnviron(t *testing.T) {
	t.Setenv("VIRTUAL_ENV", "/daemon/venv")
	t.Setenv("PATH", "/daemon/venv/bin:/usr/bin")
	u, err := user.Current()
	require.NoError(t, err)
	got := AccountEnviron()
	assert.Contains(t, got, "PATH="+DefaultPath, "not the supervisor's PATH")
	assert.Contains(t, got, "HOME="+u.HomeDir)
	assert.Contains(t, got, "USER="+u.Username)
	for _, kv := range got {
		assert.NotContains(t, kv, "/daemon/venv", "nothing of the supervisor's environment")
	}
}
