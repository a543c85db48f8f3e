package engine

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

// The test plugin's stated capabilities (plugins/internal/testplugin).
const (
	hostshTreeKill = "pgroup+scan (hostsh)"
	hostshNote     = "hostsh: no isolation, scripts run on the host (a test plugin)"
)

// pluginDirs builds the test plugin (ServeTransport with stated
// capabilities) as corral-backend-hostsh into a private directory, and a
// group-writable copy as corral-backend-badperm into another; both are on
// CORRAL_PLUGIN_PATH for the rest of the test.
func pluginDirs(t *testing.T) (good, bad string) {
	t.Helper()
	good, bad = t.TempDir(), t.TempDir()
	bin := filepath.Join(good, "corral-backend-hostsh")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/corralhq/corral/plugins/internal/testplugin").CombinedOutput()
	require.NoError(t, err, "go build the test plugin: %s", out)
	b, err := os.ReadFile(bin)
	require.NoError(t, err)
	badBin := filepath.Join(bad, "corral-backend-badperm")
	require.NoError(t, os.WriteFile(badBin, b, 0o700))
	require.NoError(t, os.Chmod(badBin, 0o775))
	t.Setenv("CORRAL_PLUGIN_PATH", good+":"+bad)
	t.Setenv("HOME", t.TempDir()) // no stray plugins from ~/.local/share
	return good, bad
}

// TestBackendsAndDoctorShowPlugins: corral backends has a one-word HEALTH
// column and, under a plugin's row, the capabilities and notes it states,
// or why it is refused (the mode printed as ls does); corral doctor shows
// the same; --backend NAME without :// names the installed plugin's form.
func TestBackendsAndDoctorShowPlugins(t *testing.T) {
	good, bad := pluginDirs(t)

	code, stdout, stderr := corral(t, "", "backends")
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(stdout, "\n")
	row := func(name string) int {
		for i, l := range lines {
			if strings.HasPrefix(l, name+" ") {
				return i
			}
		}
		require.FailNow(t, fmt.Sprintf("no row for %s in\n%s", name, stdout))
		return -1
	}
	header := lines[0]
	healthCol := strings.Index(header, "HEALTH")
	pathCol := strings.Index(header, "PATH")
	require.Positive(t, healthCol)
	// One word per HEALTH cell: the PATH column starts right after the
	// longest ("shadowed", "refused").
	assert.LessOrEqual(t, pathCol-healthCol, len("shadowed")+2, "HEALTH column too wide:\n%s", stdout)

	i := row("hostsh")
	assert.Equal(t, "ok", strings.Fields(lines[i])[3])
	assert.True(t, strings.HasSuffix(lines[i], filepath.Join(good, "corral-backend-hostsh")), lines[i])
	assert.Contains(t, lines[i+1], "    capabilities: pty, resize, stdin, reattach")
	assert.Contains(t, lines[i+1], "tree kill: "+hostshTreeKill)
	assert.Contains(t, stdout, "    note: "+hostshNote+"\n")

	i = row("badperm")
	assert.Contains(t, lines[i], " refused ")
	assert.Equal(t, filepath.Join(bad, "corral-backend-badperm"), strings.Fields(lines[i])[3])
	assert.Contains(t, lines[i+1], "    error: ")
	assert.Contains(t, lines[i+1], "writable by group or others (mode -rwxrwxr-x)")

	code, stdout, stderr = corral(t, "", "backends", "--json")
	require.Equal(t, 0, code, stderr)
	var list []backendEntry
	require.NoError(t, json.Unmarshal([]byte(stdout), &list))
	byName := map[string]backendEntry{}
	for _, b := range list {
		byName[b.Name] = b
	}
	require.NotNil(t, byName["hostsh"].Capabilities)
	assert.Equal(t, hostshTreeKill, byName["hostsh"].Capabilities.TreeKill)
	assert.Equal(t, "refused", byName["badperm"].Health)
	assert.Contains(t, byName["badperm"].Error, "writable by group or others")

	code, stdout, stderr = corral(t, "", "doctor", "--json")
	require.Equal(t, 0, code, stderr)
	var probes []probe
	require.NoError(t, json.Unmarshal([]byte(stdout), &probes))
	found := map[string]probe{}
	for _, p := range probes {
		found[p.Name] = p
	}
	require.Contains(t, found, "plugin hostsh", stdout)
	assert.True(t, found["plugin hostsh"].OK)
	assert.Contains(t, found["plugin hostsh"].Detail, "tree kill: "+hostshTreeKill)
	assert.Contains(t, found["plugin hostsh"].Detail, "note: "+hostshNote)
	assert.Equal(t, "refused", found["plugin badperm"].Status)

	// A plugin's name without :// says how to write it.
	code, _, stderr = corral(t, "", "run", "--backend", "hostsh", "--", "true")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--backend hostsh://")
	code, _, stderr = corral(t, "", "run", "--backend", "nosuchplugin", "--", "true")
	assert.Equal(t, 2, code)
	assert.NotContains(t, stderr, "nosuchplugin://")
}
