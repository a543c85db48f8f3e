package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// buildPlugins builds the example backend plugins into a private (0700)
// directory, which the plugin host's ownership check accepts.
func buildPlugins(t testing.TB, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range names {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "corral-backend-"+name),
			"github.com/corralhq/corral/plugins/examples/corral-backend-"+name)
		if out, err := cmd.CombinedOutput(); err != nil {
			require.FailNow(t, fmt.Sprintf("go build plugin %s: %v\n%s", name, err, out))
		}
	}
	return dir
}

// TestPluginCLI runs `corral run` through the re-hosted local plugin found
// on CORRAL_PLUGIN_PATH, and `corral backends` listing it.
func TestPluginCLI(t *testing.T) {
	bin := buildCorral(t)
	dir := buildPlugins(t, "localplugin")
	t.Setenv("CORRAL_PLUGIN_PATH", dir)
	t.Setenv("HOME", t.TempDir()) // no stray plugins from ~/.local/share
	// In process: plugins are found on this test's CORRAL_PLUGIN_PATH,
	// which the package's shared daemon (TestMain) was not started with.
	t.Setenv("CORRAL_NO_DAEMON", "1")

	t.Run("RunExitCodeAndOutput", func(t *testing.T) {
		r := runCorral(t, bin, strings.NewReader("from stdin\n"), "run", "--backend", "localplugin://", "--",
			"sh", "-c", "echo out; echo err >&2; cat; exit 7")
		require.Truef(t, r.code == 7, "exit code %d, want 7; stderr %q", r.code, r.stderr)
		assert.Truef(t, strings.Contains(r.stdout+r.stderr, "out\n") && strings.Contains(r.stdout+r.stderr, "err\n"), "output missing: stdout %q stderr %q", r.stdout, r.stderr)
	})

	t.Run("SecretsDoNotReachPlugin", func(t *testing.T) {
		t.Setenv("CORRAL_TEST_PLUGIN_TOKEN", "s3cret-value")
		t.Setenv("CORRAL_TEST_PLAIN", "plain-value")
		r := runCorral(t, bin, nil, "run", "--backend", "localplugin://", "--", "env")
		require.Truef(t, r.code == 0, "exit code %d; stderr %q", r.code, r.stderr)
		for _, leak := range []string{"s3cret-value", "plain-value", "PLUGIN_CLIENT_CERT", "CORRAL_BACKEND_PLUGIN"} {
			assert.Falsef(t, strings.Contains(r.stdout, leak), "the plugin's command sees %q from the host environment:\n%s", leak, r.stdout)
		}
	})

	t.Run("UnknownPlugin", func(t *testing.T) {
		r := runCorral(t, bin, nil, "run", "--backend", "nosuchplugin://x", "--", "true")
		assert.Truef(t, r.code != 0 && strings.Contains(r.stderr, "corral-backend-nosuchplugin"), "exit %d, stderr %q: want a failure naming the missing binary", r.code, r.stderr)
	})

	t.Run("Backends", func(t *testing.T) {
		r := runCorral(t, bin, nil, "backends", "--json")
		require.Truef(t, r.code == 0, "exit code %d; stderr %q", r.code, r.stderr)
		var list []struct {
			Name, Kind, Path, Health, Version string
		}
		err := json.Unmarshal([]byte(r.stdout), &list)
		require.NoErrorf(t, err, "corral backends --json: %v\n%s", err, r.stdout)
		byName := map[string]int{}
		for i, b := range list {
			byName[b.Name] = i
		}
		for _, name := range []string{"local", "docker", "docker-image", "ssh", "localplugin"} {
			_, ok := byName[name]
			assert.Truef(t, ok, "corral backends lacks %q: %s", name, r.stdout)
		}
		if i, ok := byName["localplugin"]; ok {
			b := list[i]
			assert.Truef(t, b.Kind == "plugin" && b.Health == "ok" && b.Path == filepath.Join(dir, "corral-backend-localplugin") && b.Version != "", "localplugin entry = %+v", b)
		}
	})

	t.Run("RefusesGroupWritablePlugin", func(t *testing.T) {
		bad := t.TempDir()
		src, err := os.ReadFile(filepath.Join(dir, "corral-backend-localplugin"))
		require.NoError(t, err)
		path := filepath.Join(bad, "corral-backend-badperm")
		require.NoError(t, os.WriteFile(path, src, 0o755))
		require.NoError(t, os.Chmod(path, 0o775))
		t.Setenv("CORRAL_PLUGIN_PATH", bad)
		r := runCorral(t, bin, nil, "run", "--backend", "badperm://", "--", "true")
		assert.Truef(t, r.code != 0 && strings.Contains(r.stderr, "writable by group or others"), "exit %d, stderr %q: want a refusal naming the permission problem", r.code, r.stderr)
	})
}
