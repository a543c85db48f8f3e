package plugins

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDirsEndWithExecutablesDir: the plugins that ship with corral
// (corral-backend-k8s) are found beside the running executable, after the
// user's directories, which may override them.
func TestDirsEndWithExecutablesDir(t *testing.T) {
	t.Setenv(PathEnv, "/nonexistent/a:/nonexistent/b")
	exe, err := os.Executable()
	require.NoError(t, err)
	dirs := Options{}.dirs()
	require.GreaterOrEqual(t, len(dirs), 3)
	assert.Equal(t, []string{"/nonexistent/a", "/nonexistent/b"}, dirs[:2])
	assert.Equal(t, filepath.Dir(exe), dirs[len(dirs)-1])
	assert.Equal(t, []string{"/x"}, Options{Dirs: []string{"/x"}}.dirs(), "explicit Dirs are the whole list")
}
