package backends

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/internal/errclass"
	"github.com/corralhq/corral/registry"
)

// TestUnknownTargetIsABadRequest: a target this build cannot open is the
// caller's mistake, of the registry's invalid-options class, which the
// daemon answers 400 (GET /v1/ports?backend=nosuch://x was a 500); a
// target that resolves but cannot be reached is not.
func TestUnknownTargetIsABadRequest(t *testing.T) {
	t.Setenv("CORRAL_PLUGIN_PATH", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	for _, target := range []string{"nosuch://x", "nosuch", "", "docker://"} {
		_, err := Options{}.Open(context.Background(), target)
		require.Error(t, err, target)
		assert.True(t, errors.Is(err, registry.ErrInvalidOptions), "%q: %v", target, err)
		assert.Equal(t, errclass.Invalid, errclass.Of(err), "%q: %v", target, err)
		// With the registry's prefix, it stays a short error.
		assert.LessOrEqual(t, len(`registry: open backend "`+target+`": `+err.Error()), 400, "%q: %v", target, err)
	}
}
