package plugins_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/plugins"
)

// copyPlugin copies the built localplugin to dir/corral-backend-name.
func copyPlugin(t *testing.T, dir, name string, mode os.FileMode) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(pluginDir, "corral-backend-localplugin"))
	require.NoError(t, err)
	path := filepath.Join(dir, "corral-backend-"+name)
	require.NoError(t, os.WriteFile(path, b, 0o700))
	require.NoError(t, os.Chmod(path, mode))
	return path
}

func TestDiscover(t *testing.T) {
	first, second := t.TempDir(), t.TempDir()
	copyPlugin(t, first, "alpha", 0o755)
	copyPlugin(t, second, "alpha", 0o755) // shadowed by first
	copyPlugin(t, second, "beta", 0o755)
	copyPlugin(t, second, "noexec", 0o644)
	require.NoError(t, os.WriteFile(filepath.Join(second, "unrelated"), nil, 0o755))
	t.Setenv(plugins.PathEnv, first+":"+second)
	t.Setenv("HOME", t.TempDir())
	found, err := plugins.Discover(plugins.Options{})
	require.NoError(t, err)
	want := []plugins.Found{
		{Name: "alpha", Path: filepath.Join(first, "corral-backend-alpha")},
		{Name: "beta", Path: filepath.Join(second, "corral-backend-beta")},
	}
	assert.Truef(t, len(found) == len(want) && found[0] == want[0] && found[1] == want[1], "Discover = %+v, want %+v", found, want)
	if _, err := plugins.Find("gamma", plugins.Options{}); !errors.Is(err, plugins.ErrNoPlugin) || !strings.Contains(err.Error(), first) {
		assert.Fail(t, fmt.Sprintf("Find(gamma) = %v, want ErrNoPlugin naming the directories", err))
	}
	if _, err := plugins.Find("../x", plugins.Options{}); err == nil {
		assert.Fail(t, "Find accepted a name with a path in it")
	}
}

func TestRefusesWritablePlugin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	dir := t.TempDir()
	copyPlugin(t, dir, "groupw", 0o775)
	_, err := plugins.Open(ctx, "groupw://", plugins.Options{Dirs: []string{dir}})
	require.ErrorIs(t, err, plugins.ErrRefused, "group-writable binary")
	require.ErrorContains(t, err, "writable by group or others (mode -rwxrwxr-x)")

	open := t.TempDir()
	require.NoError(t, os.Chmod(open, 0o777))
	copyPlugin(t, open, "dirw", 0o755)
	_, err = plugins.Open(ctx, "dirw://", plugins.Options{Dirs: []string{open}})
	// The mode reads as ls prints it, with the d of a directory.
	require.ErrorIs(t, err, plugins.ErrRefused, "binary in a world-writable directory")
	require.ErrorContains(t, err, "writable by group or others (mode drwxrwxrwx)")

	if os.Getuid() == 0 {
		// As root, a file owned by another user is the case to refuse.
		other := t.TempDir()
		path := copyPlugin(t, other, "owned", 0o755)
		require.NoError(t, os.Chown(path, 12345, 12345))
		_, err = plugins.Open(ctx, "owned://", plugins.Options{Dirs: []string{other}})
		assert.Truef(t, err != nil && strings.Contains(err.Error(), "owned by uid 12345"), "binary owned by another user: Open = %v, want a refusal", err)
	}
}

func TestChecksumPinning(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := os.ReadFile(filepath.Join(pluginDir, "corral-backend-localplugin"))
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	good := hex.EncodeToString(sum[:])
	target := "localplugin://?state=" + t.TempDir()

	e, err := plugins.Open(ctx, target, plugins.Options{Dirs: []string{pluginDir}, Checksums: map[string]string{"localplugin": good}})
	require.NoError(t, err, "Open with the right checksum")
	e.Close()

	sum[0] ^= 0xff
	bad := hex.EncodeToString(sum[:])
	_, err = plugins.Open(ctx, target, plugins.Options{Dirs: []string{pluginDir}, Checksums: map[string]string{"localplugin": bad}})
	assert.Truef(t, err != nil && strings.Contains(err.Error(), "does not match the pinned checksum"), "Open with a wrong checksum = %v, want a refusal", err)
	_, err = plugins.Open(ctx, target, plugins.Options{Dirs: []string{pluginDir}, Checksums: map[string]string{"localplugin": "xyz"}})
	assert.Error(t, err, "Open with a malformed checksum succeeded")
}

func TestProbe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := plugins.Find("localplugin", testOptions())
	require.NoError(t, err)
	info, err := plugins.Probe(ctx, f, testOptions())
	require.NoError(t, err)
	assert.Truef(t, info.Name == "localplugin" && info.Version != "" && len(info.Protocols) != 0, "Probe = %+v", info)
	// A binary named for another backend is reported, not trusted.
	dir := t.TempDir()
	copyPlugin(t, dir, "impostor", 0o755)
	f, err = plugins.Find("impostor", plugins.Options{Dirs: []string{dir}})
	require.NoError(t, err)
	if _, err := plugins.Probe(ctx, f, plugins.Options{Dirs: []string{dir}}); err == nil || !strings.Contains(err.Error(), "calls itself") {
		assert.Fail(t, fmt.Sprintf("Probe of a misnamed plugin = %v", err))
	}
}
