package docker

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// endpoint is where the Docker engine is, as the docker CLI would find it.
type endpoint struct {
	// Host is the engine address (unix:///var/run/docker.sock,
	// tcp://host:2376, …); empty means the client library's default.
	Host string
	// TLSDir holds ca.pem, cert.pem and key.pem for a context with TLS
	// material; empty when there is none.
	TLSDir string
	// SkipTLSVerify is the context's own setting.
	SkipTLSVerify bool
	// Source says where Host came from, for error messages.
	Source string
}

// resolveEndpoint finds the engine the way the docker CLI does: DOCKER_HOST
// wins; otherwise the context named by DOCKER_CONTEXT, or else by
// currentContext in config.json (DOCKER_CONFIG or ~/.docker); the context
// "default" and no context at all mean the library default. getenv is
// os.Getenv outside tests.
func resolveEndpoint(getenv func(string) string) (endpoint, error) {
	if h := getenv("DOCKER_HOST"); h != "" {
		return endpoint{Host: h, Source: "DOCKER_HOST"}, nil
	}
	configDir := getenv("DOCKER_CONFIG")
	if configDir == "" {
		home := getenv("HOME")
		if home == "" {
			return endpoint{Source: "default"}, nil
		}
		configDir = filepath.Join(home, ".docker")
	}
	name, source := getenv("DOCKER_CONTEXT"), "DOCKER_CONTEXT"
	if name == "" {
		var err error
		name, err = currentContext(configDir)
		if err != nil {
			return endpoint{}, err
		}
		source = filepath.Join(configDir, "config.json")
	}
	if name == "" || name == "default" {
		return endpoint{Source: "default"}, nil
	}
	return contextEndpoint(configDir, name, source)
}

func currentContext(configDir string) (string, error) {
	file := filepath.Join(configDir, "config.json")
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("docker: read %s: %w", file, err)
	}
	var cfg struct {
		CurrentContext string `json:"currentContext"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return "", fmt.Errorf("docker: parse %s: %w", file, err)
	}
	return cfg.CurrentContext, nil
}

// contextEndpoint reads the docker endpoint of context name from its
// metadata, stored by the CLI under the SHA-256 of the name.
func contextEndpoint(configDir, name, source string) (endpoint, error) {
	sum := sha256.Sum256([]byte(name))
	id := hex.EncodeToString(sum[:])
	file := filepath.Join(configDir, "contexts", "meta", id, "meta.json")
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return endpoint{}, fmt.Errorf("docker: context %q (from %s) does not exist: no %s; list contexts with `docker context ls`", name, source, file)
	}
	if err != nil {
		return endpoint{}, fmt.Errorf("docker: read context %q: %w", name, err)
	}
	var meta struct {
		Endpoints map[string]struct {
			Host          string `json:"Host"`
			SkipTLSVerify bool   `json:"SkipTLSVerify"`
		} `json:"Endpoints"`
	}
	if err := json.Unmarshal(data, &meta); err != nil {
		return endpoint{}, fmt.Errorf("docker: parse context %q metadata %s: %w", name, file, err)
	}
	ep, ok := meta.Endpoints["docker"]
	if !ok || ep.Host == "" {
		return endpoint{}, fmt.Errorf("docker: context %q (from %s) has no docker endpoint in %s", name, source, file)
	}
	out := endpoint{Host: ep.Host, SkipTLSVerify: ep.SkipTLSVerify, Source: fmt.Sprintf("context %q", name)}
	tlsDir := filepath.Join(configDir, "contexts", "tls", id, "docker")
	if _, err := os.Stat(filepath.Join(tlsDir, "cert.pem")); err == nil {
		out.TLSDir = tlsDir
	}
	return out, nil
}
