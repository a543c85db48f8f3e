package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/docker"
	"github.com/corralhq/corral/env/local"
	"github.com/corralhq/corral/env/ssh"
	"github.com/corralhq/corral/plugins"
)

// This file is the one place where backend targets are resolved to
// Environments. A new backend adds one case to checkBackend and one to
// backendOptions.open.

// defaultBackend is used when --backend is not given.
const defaultBackend = "local"

// backendHelp lists the targets this build accepts, for flag help and
// error messages.
const backendHelp = `"local", "docker://CONTAINER", "docker-image://IMAGE[?options]" or "ssh://[user@]host[:port]"`

// checkBackend rejects a --backend value this build cannot open, before
// anything starts, so a typo is a usage error rather than a failed run.
// What can only be checked by connecting (a missing container, an
// unreachable host) fails later, in open.
func checkBackend(target string) error {
	scheme, _, hasScheme := strings.Cut(target, "://")
	switch {
	case target == "local":
		return nil
	case target == "":
		return fmt.Errorf("--backend is empty: use %s", backendHelp)
	case hasScheme && (scheme == "docker" || scheme == "docker-image"):
		if _, err := docker.ParseTarget(target); err != nil {
			return fmt.Errorf("--backend %q: %w", target, err)
		}
		return nil
	case hasScheme && scheme == "ssh":
		return nil
	case hasScheme && plugins.ValidName(scheme):
		// A backend plugin (`corral backends` lists them).
		if _, err := plugins.Find(scheme, plugins.Options{}); err != nil {
			return fmt.Errorf("backend %q: %w; built-in backends: %s", target, err, backendHelp)
		}
		return nil
	default:
		if !hasScheme && plugins.ValidName(target) {
			if _, err := plugins.Find(target, plugins.Options{}); err == nil {
				return fmt.Errorf("backend %q not available: the plugin %s is installed; its targets start with %s:// (--backend %s://)", target, target, target, target)
			}
		}
		return fmt.Errorf("backend %q not available: use %s or a plugin's NAME://", target, backendHelp)
	}
}

// backendOptions carries the flags that configure backends.
type backendOptions struct {
	// allowEnv names secret-looking variables of corral's environment that
	// the local backend passes on nevertheless (--allow-env).
	allowEnv []string
	// idleClose closes a backend's connection (SSH) after that long
	// without use; zero keeps it open. Only the daemon, which outlives
	// its callers, sets it.
	idleClose time.Duration
	// environ is the local backend's base environment (nil: this
	// process's). The daemon sets local.AccountEnviron: its callers send
	// their own environment, and nothing of the daemon's may reach their
	// commands.
	environ []string
}

// open is the registry's Config.Open: it resolves a target to an
// Environment. Sandboxes (containers, hosts) are configured the way their
// own tools are: the Docker context and DOCKER_HOST, ~/.ssh/config,
// known_hosts and the agent.
func (b backendOptions) open(ctx context.Context, target string) (env.Environment, error) {
	if err := checkBackend(target); err != nil {
		return nil, err
	}
	scheme, _, _ := strings.Cut(target, "://")
	var (
		e   env.Environment
		err error
	)
	switch scheme {
	case "local":
		e, err = local.New(local.Options{AllowEnv: b.allowEnv, Environ: b.environ})
	case "docker", "docker-image":
		e, err = docker.Open(ctx, target, docker.Options{})
	case "ssh":
		e, err = ssh.Open(ctx, target, ssh.Options{IdleClose: b.idleClose})
	default:
		e, err = plugins.Open(ctx, target, plugins.Options{Logger: slog.Default()})
	}
	if err != nil {
		return nil, err // the registry adds the target
	}
	return e, nil
}

// sandboxRemovalWait bounds how long an exiting corral waits for the
// engine to delete the docker-image:// sandboxes it closed.
const sandboxRemovalWait = 15 * time.Second

// waitSandboxRemovals is what a corral that closed its registry does
// before it exits: Close of a docker-image:// sandbox returns while the
// engine deletes it (as docker run --rm leaves it), and only a wait tells
// whether a deletion failed (the container is then left, labelled, for
// the next Reap).
func waitSandboxRemovals() {
	ctx, cancel := context.WithTimeout(context.Background(), sandboxRemovalWait)
	defer cancel()
	if err := docker.WaitRemoved(ctx); err != nil {
		slog.Warn("docker-image sandboxes may be left behind", "err", err)
	}
}
