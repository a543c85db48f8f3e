package cli

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/daemon"
)

func TestOwnerFromEnv(t *testing.T) {
	t.Setenv(daemon.OwnerEnv, "")
	pid, err := ownerFromEnv()
	require.NoError(t, err)
	assert.Zero(t, pid)
	t.Setenv(daemon.OwnerEnv, "1234")
	pid, err = ownerFromEnv()
	require.NoError(t, err)
	assert.Equal(t, 1234, pid)
	for _, bad := range []string{"x", "-3", "0", "12 34"} {
		t.Setenv(daemon.OwnerEnv, bad)
		_, err := ownerFromEnv()
		assert.Error(t, err, bad)
	}
}
