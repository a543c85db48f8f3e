package local

import (
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// testTempDir is t.TempDir for tests that also run on Windows. Under Wine
// 8.0, Go 1.26's os.RemoveAll cannot delete a directory that holds files:
// it deletes through FileDispositionInformationEx, which Wine does not
// implement, and Go falls back to the older call only on other errors
// ("unlinkat …: Invalid function."). t.TempDir's cleanup then fails the
// test. On Windows this makes the directory with os.MkdirTemp and removes
// it entry by entry when RemoveAll fails (os.Remove uses DeleteFile and
// RemoveDirectory, which Wine has). What still cannot be removed (a file a
// process keeps open) is logged, not failed: it is inside the temporary
// directory, and under Wine inside a prefix removed after the run.
func testTempDir(t testing.TB) string {
	t.Helper()
	if runtime.GOOS != "windows" {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp("", "corral-test-")
	if err != nil {
		t.Fatalf("make a temporary directory: %v; check TEMP", err)
	}
	t.Cleanup(func() {
		if err := removeTree(dir); err != nil {
			t.Logf("temporary directory %s left behind: %v", dir, err)
		}
	})
	return dir
}

// removeTree is os.RemoveAll with a fallback that removes the entries one
// at a time, deepest first: see testTempDir.
func removeTree(dir string) error {
	if os.RemoveAll(dir) == nil {
		return nil
	}
	var paths []string
	_ = filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err == nil {
			paths = append(paths, path)
		}
		return nil
	})
	// WalkDir lists a directory before its entries, so the reverse order
	// empties each directory before removing it.
	var first error
	for _, path := range slices.Backward(paths) {
		if err := os.Remove(path); err != nil && first == nil && !os.IsNotExist(err) {
			first = err
		}
	}
	return first
}

// TestTestTempDirRemovesFiles checks that testTempDir's directory is gone
// after its test, files and subdirectories included. On Windows under
// Wine 8.0 this is what t.TempDir cannot do (see testTempDir).
func TestTestTempDirRemovesFiles(t *testing.T) {
	var dir string
	t.Run("fill", func(t *testing.T) {
		dir = testTempDir(t)
		sub := filepath.Join(dir, "a", "b")
		require.NoError(t, os.MkdirAll(sub, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "top"), []byte("x"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(sub, "deep"), []byte("y"), 0o644))
	})
	_, err := os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist, "testTempDir's directory %s is still there after its test", dir)
}
