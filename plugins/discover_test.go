package plugins_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/plugins"
)

// copyPlugin copies the built localplugin to dir/corral-backend-name.
func copyPlugin(t *testing.T, dir, name string, mode os.FileMode) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(pluginDir, "corral-backend-localplugin"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "corral-backend-"+name)
	if err := os.WriteFile(path, b, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDiscover(t *testing.T) {
	first, second := t.TempDir(), t.TempDir()
	copyPlugin(t, first, "alpha", 0o755)
	copyPlugin(t, second, "alpha", 0o755) // shadowed by first
	copyPlugin(t, second, "beta", 0o755)
	copyPlugin(t, second, "noexec", 0o644)
	if err := os.WriteFile(filepath.Join(second, "unrelated"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(plugins.PathEnv, first+":"+second)
	t.Setenv("HOME", t.TempDir())
	found, err := plugins.Discover(plugins.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []plugins.Found{
		{Name: "alpha", Path: filepath.Join(first, "corral-backend-alpha")},
		{Name: "beta", Path: filepath.Join(second, "corral-backend-beta")},
	}
	if len(found) != len(want) || found[0] != want[0] || found[1] != want[1] {
		t.Errorf("Discover = %+v, want %+v", found, want)
	}
	if _, err := plugins.Find("gamma", plugins.Options{}); !errors.Is(err, plugins.ErrNoPlugin) || !strings.Contains(err.Error(), first) {
		t.Errorf("Find(gamma) = %v, want ErrNoPlugin naming the directories", err)
	}
	if _, err := plugins.Find("../x", plugins.Options{}); err == nil {
		t.Error("Find accepted a name with a path in it")
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
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	copyPlugin(t, open, "dirw", 0o755)
	_, err = plugins.Open(ctx, "dirw://", plugins.Options{Dirs: []string{open}})
	// The mode reads as ls prints it, with the d of a directory.
	require.ErrorIs(t, err, plugins.ErrRefused, "binary in a world-writable directory")
	require.ErrorContains(t, err, "writable by group or others (mode drwxrwxrwx)")

	if os.Getuid() == 0 {
		// As root, a file owned by another user is the case to refuse.
		other := t.TempDir()
		path := copyPlugin(t, other, "owned", 0o755)
		if err := os.Chown(path, 12345, 12345); err != nil {
			t.Fatal(err)
		}
		_, err = plugins.Open(ctx, "owned://", plugins.Options{Dirs: []string{other}})
		if err == nil || !strings.Contains(err.Error(), "owned by uid 12345") {
			t.Errorf("binary owned by another user: Open = %v, want a refusal", err)
		}
	}
}

func TestChecksumPinning(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := os.ReadFile(filepath.Join(pluginDir, "corral-backend-localplugin"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	good := hex.EncodeToString(sum[:])
	target := "localplugin://?state=" + t.TempDir()

	e, err := plugins.Open(ctx, target, plugins.Options{Dirs: []string{pluginDir}, Checksums: map[string]string{"localplugin": good}})
	if err != nil {
		t.Fatalf("Open with the right checksum: %v", err)
	}
	e.Close()

	sum[0] ^= 0xff
	bad := hex.EncodeToString(sum[:])
	_, err = plugins.Open(ctx, target, plugins.Options{Dirs: []string{pluginDir}, Checksums: map[string]string{"localplugin": bad}})
	if err == nil || !strings.Contains(err.Error(), "does not match the pinned checksum") {
		t.Errorf("Open with a wrong checksum = %v, want a refusal", err)
	}
	_, err = plugins.Open(ctx, target, plugins.Options{Dirs: []string{pluginDir}, Checksums: map[string]string{"localplugin": "xyz"}})
	if err == nil {
		t.Error("Open with a malformed checksum succeeded")
	}
}

func TestProbe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := plugins.Find("localplugin", testOptions())
	if err != nil {
		t.Fatal(err)
	}
	info, err := plugins.Probe(ctx, f, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "localplugin" || info.Version == "" || len(info.Protocols) == 0 {
		t.Errorf("Probe = %+v", info)
	}
	// A binary named for another backend is reported, not trusted.
	dir := t.TempDir()
	copyPlugin(t, dir, "impostor", 0o755)
	f, err = plugins.Find("impostor", plugins.Options{Dirs: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plugins.Probe(ctx, f, plugins.Options{Dirs: []string{dir}}); err == nil || !strings.Contains(err.Error(), "calls itself") {
		t.Errorf("Probe of a misnamed plugin = %v", err)
	}
}
