package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
)

// This file is the one place where backend targets are resolved to
// Environments. A new backend adds one case to checkBackend and one to
// backendOptions.open.

// defaultBackend is used when --backend is not given.
const defaultBackend = "local"

// checkBackend rejects a --backend value this build cannot open, before
// anything starts, so a typo is a usage error rather than a failed run.
func checkBackend(target string) error {
	switch {
	case target == "local":
		return nil
	case target == "":
		return fmt.Errorf("--backend is empty: use \"local\"")
	default:
		scheme, _, _ := strings.Cut(target, "://")
		return fmt.Errorf("backend %q not available yet: this build supports only \"local\" (got scheme %q)", target, scheme)
	}
}

// backendOptions carries the flags that configure backends.
type backendOptions struct {
	// allowEnv names secret-looking variables of corral's environment that
	// the local backend passes on nevertheless (--allow-env).
	allowEnv []string
}

// open is the registry's Config.Open: it resolves a target such as
// "local" (later "docker://web", "ssh://host") to an Environment.
func (b backendOptions) open(ctx context.Context, target string) (env.Environment, error) {
	if err := checkBackend(target); err != nil {
		return nil, err
	}
	switch target {
	case "local":
		e, err := local.New(local.Options{AllowEnv: b.allowEnv})
		if err != nil {
			return nil, fmt.Errorf("open backend local: %w", err)
		}
		return e, nil
	}
	return nil, fmt.Errorf("backend %q: no resolver", target)
}
