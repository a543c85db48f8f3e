package registry

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseLabels(t *testing.T) {
	m, err := ParseLabels([]string{"team=web", "empty=", "eq=a=b", "team=api"})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"team": "api", "empty": "", "eq": "a=b"}, m, "the value is what follows the first =; the last of a key wins")

	m, err = ParseLabels(nil)
	require.NoError(t, err)
	assert.Nil(t, m)

	for _, bad := range []string{"team", "=web", "", strings.Repeat("x", 1000)} {
		_, err := ParseLabels([]string{"ok=1", bad})
		require.ErrorIs(t, err, ErrInvalidOptions, "%.20q", bad)
		assert.Contains(t, err.Error(), "use KEY=VALUE")
		assert.Less(t, len(err.Error()), 200, "the error repeats its input")
	}
}
