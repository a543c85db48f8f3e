package docker

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// writeContext stores a context the way `docker context create` does.
func writeContext(t *testing.T, configDir, name, host string, withTLS bool) {
	t.Helper()
	sum := sha256.Sum256([]byte(name))
	id := hex.EncodeToString(sum[:])
	dir := filepath.Join(configDir, "contexts", "meta", id)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	meta := `{"Name":"` + name + `","Metadata":{"Description":"test"},"Endpoints":{"docker":{"Host":"` + host + `","SkipTLSVerify":false}}}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "meta.json"), []byte(meta), 0o644))
	if withTLS {
		tlsDir := filepath.Join(configDir, "contexts", "tls", id, "docker")
		require.NoError(t, os.MkdirAll(tlsDir, 0o700))
		for _, f := range []string{"ca.pem", "cert.pem", "key.pem"} {
			require.NoError(t, os.WriteFile(filepath.Join(tlsDir, f), []byte("x"), 0o600))
		}
	}
}

func envFunc(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestResolveEndpoint(t *testing.T) {
	home := t.TempDir()
	configDir := filepath.Join(home, ".docker")
	writeContext(t, configDir, "remote", "tcp://10.0.0.1:2376", true)
	writeContext(t, configDir, "rootless", "unix:///run/user/1000/docker.sock", false)

	// No config.json: the library default.
	ep, err := resolveEndpoint(envFunc(map[string]string{"HOME": home}))
	require.Truef(t, err == nil && ep.Host == "", "no context: %+v, %v; want the default", ep, err)

	require.NoError(t, os.WriteFile(filepath.Join(configDir, "config.json"), []byte(`{"auths":{},"currentContext":"rootless"}`), 0o600))
	ep, err = resolveEndpoint(envFunc(map[string]string{"HOME": home}))
	require.Truef(t, err == nil && ep.Host == "unix:///run/user/1000/docker.sock" && ep.TLSDir == "", "currentContext rootless: %+v, %v", ep, err)

	// DOCKER_CONTEXT beats config.json, and finds the context's TLS files.
	ep, err = resolveEndpoint(envFunc(map[string]string{"HOME": home, "DOCKER_CONTEXT": "remote"}))
	require.Truef(t, err == nil && ep.Host == "tcp://10.0.0.1:2376" && strings.HasSuffix(ep.TLSDir, filepath.Join("tls", hexName("remote"), "docker")), "DOCKER_CONTEXT remote: %+v, %v", ep, err)

	// DOCKER_HOST beats every context.
	ep, err = resolveEndpoint(envFunc(map[string]string{"HOME": home, "DOCKER_CONTEXT": "remote", "DOCKER_HOST": "unix:///x.sock"}))
	require.Truef(t, err == nil && ep.Host == "unix:///x.sock" && ep.Source == "DOCKER_HOST", "DOCKER_HOST: %+v, %v", ep, err)

	// "default" is the library default.
	ep, err = resolveEndpoint(envFunc(map[string]string{"HOME": home, "DOCKER_CONTEXT": "default"}))
	require.Truef(t, err == nil && ep.Host == "", "context default: %+v, %v", ep, err)

	// DOCKER_CONFIG moves the config directory.
	other := t.TempDir()
	writeContext(t, other, "elsewhere", "tcp://127.0.0.1:1", false)
	require.NoError(t, os.WriteFile(filepath.Join(other, "config.json"), []byte(`{"currentContext":"elsewhere"}`), 0o600))
	ep, err = resolveEndpoint(envFunc(map[string]string{"HOME": home, "DOCKER_CONFIG": other}))
	require.Truef(t, err == nil && ep.Host == "tcp://127.0.0.1:1", "DOCKER_CONFIG: %+v, %v", ep, err)

	// A context that does not exist is an error naming it and the fix.
	_, err = resolveEndpoint(envFunc(map[string]string{"HOME": home, "DOCKER_CONTEXT": "nope"}))
	require.Truef(t, err != nil && strings.Contains(err.Error(), `"nope"`) && strings.Contains(err.Error(), "docker context ls"), "missing context: %v", err)

	// A corrupt config.json is reported, not ignored.
	require.NoError(t, os.WriteFile(filepath.Join(configDir, "config.json"), []byte(`{`), 0o600))
	if _, err := resolveEndpoint(envFunc(map[string]string{"HOME": home})); err == nil {
		require.FailNow(t, "corrupt config.json accepted")
	}
}

func hexName(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:])
}
