package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/docker"
	"github.com/corralhq/corral/env/local"
	"github.com/corralhq/corral/env/ssh"
	"github.com/corralhq/corral/internal/errclass"
	"github.com/corralhq/corral/plugins"
	"github.com/corralhq/corral/registry"
)

// This file is the one place where backend targets are resolved to
// Environments. A new backend adds one case to checkBackend and one to
// backendOptions.open.

// defaultBackend is used when --backend is not given.
const defaultBackend = "local"

// backendHelp lists the targets this build accepts, for flag help and
// error messages.
const backendHelp = `"local", "docker://CONTAINER", "docker-image://IMAGE[?options]", "ssh://[user@]host[:port]", "k8s://NAMESPACE/POD[/CONTAINER]" or "k8s-pod://IMAGE[?options]"`

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
	case hasScheme && (scheme == "k8s" || scheme == "k8s-pod"):
		// Checked by the plugin, which alone links client-go.
		if _, err := plugins.Find(k8sPlugin, plugins.Options{}); err != nil {
			if errors.Is(err, plugins.ErrNoPlugin) {
				return fmt.Errorf("backend %q: the Kubernetes backend %s%s is not installed beside corral or in a plugin directory (make build puts it in bin/; go install ./cmd/... in GOBIN)",
					target, plugins.BinaryPrefix, k8sPlugin)
			}
			return fmt.Errorf("backend %q: %w", target, err)
		}
		return nil
	case hasScheme && plugins.ValidName(scheme):
		// A backend plugin (`corral backends` lists them).
		if _, err := plugins.Find(scheme, plugins.Options{}); err != nil {
			if errors.Is(err, plugins.ErrNoPlugin) {
				// Short: the directories searched are corral backends' to
				// show, not every error's.
				return fmt.Errorf("backend %q: no plugin %s%s is installed (corral backends lists the plugins and where they are looked for); built-in backends: %s",
					target, plugins.BinaryPrefix, scheme, backendHelp)
			}
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

// invalidTarget is a target this build cannot open (checkBackend's
// verdict): a bad option of the request, of the registry's
// ErrInvalidOptions class, so that the daemon answers it 400, not as a
// backend failure. Its message is checkBackend's.
type invalidTarget struct{ err error }

func (e invalidTarget) Error() string { return e.err.Error() }
func (e invalidTarget) Unwrap() error { return e.err }
func (e invalidTarget) Is(target error) bool {
	return target == registry.ErrInvalidOptions || errclass.Match(target, errclass.Invalid)
}

// backendOptions carries the flags that configure backends.
type backendOptions struct {
	// ceiling holds every local process under one parent cgroup with
	// these limits (serve --max-memory, --max-cpus, --max-pids); nil: none.
	ceiling *env.Limits
	// allowEnv names secret-looking variables of corral's environment that
	// the local backend passes on nevertheless (--allow-env).
	allowEnv []string
	// idleClose closes a backend's connection (SSH) after that long
	// without use; zero keeps it open. Only the daemon, which outlives
	// its callers, sets it.
	idleClose time.Duration
	// owner owns the docker-image:// sandboxes this registry creates
	// (docker.Options.Owner): daemonOwner or privateOwner, so that no two
	// registries share a sandbox unless its target says shared=true.
	owner string
	// private: the registry lives as long as one command (privateOwner).
	private bool
	// logMax bounds each process's log on disk (env.LogKeep): 0 means
	// $CORRAL_LOG_MAX, else env.DefaultLogMax; negative, no bound.
	logMax int64
	// environ is the local backend's base environment (nil: this
	// process's). The daemon sets local.AccountEnviron: its callers send
	// their own environment, and nothing of the daemon's may reach their
	// commands.
	environ []string
}

// logMaxEnv is $CORRAL_LOG_MAX (see env.ParseLogMax), 0 when unset; an
// error for a value that does not parse.
func logMaxEnv() (int64, error) {
	v := os.Getenv("CORRAL_LOG_MAX")
	if v == "" {
		return 0, nil
	}
	n, err := env.ParseLogMax(v)
	if err != nil {
		return 0, fmt.Errorf("CORRAL_LOG_MAX: %w", err)
	}
	return n, nil
}

// dockerOwner is the owner of target's sandbox. A private registry's
// persist=true sandbox is the user's (docker.DefaultOwner), since it is
// kept for the next command to find.
func (b backendOptions) dockerOwner(target string) string {
	if b.private {
		if t, err := docker.ParseTarget(target); err == nil && t.Sandbox.Persist {
			return ""
		}
	}
	return b.owner
}

// daemonOwner is the sandbox owner of the daemon whose state lives in
// stateDir: a daemon restarted on that directory finds its sandboxes
// again, and one with another HOME has its own.
func daemonOwner(stateDir string) string {
	if abs, err := filepath.Abs(stateDir); err == nil {
		stateDir = abs
	}
	return docker.OwnerFor("daemon " + stateDir)
}

// privateOwner is the sandbox owner of a registry that lives as long as
// one command (--no-daemon, an in-process MCP or ACP front end): nobody
// else may use or remove its sandboxes, and it never re-attaches.
func privateOwner() string {
	return docker.OwnerFor(fmt.Sprintf("process %d %s", os.Getpid(), rand.Text()))
}

// open is the registry's Config.Open: it resolves a target to an
// Environment. Sandboxes (containers, hosts) are configured the way their
// own tools are: the Docker context and DOCKER_HOST, ~/.ssh/config,
// known_hosts and the agent.
func (b backendOptions) open(ctx context.Context, target string) (env.Environment, error) {
	if err := checkBackend(target); err != nil {
		return nil, invalidTarget{err}
	}
	scheme, _, _ := strings.Cut(target, "://")
	var (
		e   env.Environment
		err error
	)
	logMax := b.logMax
	if logMax == 0 {
		logMax, _ = logMaxEnv() // a bad value: serve refuses it; elsewhere the default
	}
	switch scheme {
	case "local":
		e, err = local.New(local.Options{AllowEnv: b.allowEnv, LogMax: logMax, Environ: b.environ, Ceiling: b.ceiling})
	case "docker", "docker-image":
		e, err = docker.Open(ctx, target, docker.Options{Owner: b.dockerOwner(target), LogMax: logMax})
	case "ssh":
		e, err = ssh.Open(ctx, target, ssh.Options{IdleClose: b.idleClose, LogMax: logMax})
	case "k8s", "k8s-pod":
		e, err = plugins.OpenPlugin(ctx, k8sPlugin, target, plugins.Options{Logger: slog.Default(), Env: k8sEnviron(), Owner: b.owner})
	default:
		e, err = plugins.Open(ctx, target, plugins.Options{Logger: slog.Default()})
	}
	if err != nil {
		return nil, err // the registry adds the target
	}
	return e, nil
}

// k8sPlugin serves k8s:// and k8s-pod:// targets: client-go lives in that
// binary only (see cmd/corral-backend-k8s).
const k8sPlugin = "k8s"

// k8sEnviron is what the Kubernetes plugin gets of corral's environment:
// where the kubeconfig is, and the in-cluster API server when corral runs
// in a pod.
func k8sEnviron() []string {
	var out []string
	for _, k := range []string{"KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"} {
		if v, ok := os.LookupEnv(k); ok {
			out = append(out, k+"="+v)
		}
	}
	return out
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
