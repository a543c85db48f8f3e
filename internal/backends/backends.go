// Package backends resolves backend targets to Environments: the one place
// that links every built-in backend (the Docker SDK, x/crypto/ssh, the
// plugin host). Only the processes that serve backends import it: the
// daemon, a --no-daemon run and an --in-process front end (corrald); the
// thin command line leaves the check of a target to them.
package backends

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
	"github.com/corralhq/corral/env/local/secrets"
	"github.com/corralhq/corral/env/ssh"
	"github.com/corralhq/corral/internal/errclass"
	"github.com/corralhq/corral/internal/targets"
	"github.com/corralhq/corral/plugins"
	"github.com/corralhq/corral/registry"
)

// Check rejects a --backend value this build cannot open, before
// anything starts, so a typo is a usage error rather than a failed run.
// What can only be checked by connecting (a missing container, an
// unreachable host) fails later, in open.
func Check(target string) error {
	scheme, _, hasScheme := strings.Cut(target, "://")
	switch {
	case target == "local":
		return nil
	case target == "":
		return fmt.Errorf("--backend is empty: use %s", targets.Help)
	case hasScheme && (scheme == "docker" || scheme == "docker-image"):
		if _, err := docker.ParseTarget(target); err != nil {
			return fmt.Errorf("--backend %q: %w", target, err)
		}
		return nil
	case hasScheme && scheme == "ssh":
		return nil
	case hasScheme && (scheme == "k8s" || scheme == "k8s-pod"):
		// Checked by the plugin, which alone links client-go.
		if _, err := plugins.Find(K8sPlugin, plugins.Options{}); err != nil {
			if errors.Is(err, plugins.ErrNoPlugin) {
				return fmt.Errorf("backend %q: the Kubernetes backend %s%s is not installed beside corral or in a plugin directory (make build puts it in bin/; go install ./cmd/... in GOBIN)",
					target, plugins.BinaryPrefix, K8sPlugin)
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
					target, plugins.BinaryPrefix, scheme, targets.Help)
			}
			return fmt.Errorf("backend %q: %w; built-in backends: %s", target, err, targets.Help)
		}
		return nil
	default:
		if !hasScheme && plugins.ValidName(target) {
			if _, err := plugins.Find(target, plugins.Options{}); err == nil {
				return fmt.Errorf("backend %q not available: the plugin %s is installed; its targets start with %s:// (--backend %s://)", target, target, target, target)
			}
		}
		return fmt.Errorf("backend %q not available: use %s or a plugin's NAME://", target, targets.Help)
	}
}

// invalidTarget is a target this build cannot open (Check's
// verdict): a bad option of the request, of the registry's
// ErrInvalidOptions class, so that the daemon answers it 400, not as a
// backend failure. Its message is Check's.
type invalidTarget struct{ err error }

func (e invalidTarget) Error() string { return e.err.Error() }
func (e invalidTarget) Unwrap() error { return e.err }
func (e invalidTarget) Is(target error) bool {
	return target == registry.ErrInvalidOptions || errclass.Match(target, errclass.Invalid)
}

// Options carries the flags that configure backends.
type Options struct {
	// ceiling holds every local process under one parent cgroup with
	// these limits (serve --max-memory, --max-cpus, --max-pids); nil: none.
	Ceiling *env.Limits
	// allowEnv names secret-looking variables of corral's environment that
	// the local backend passes on nevertheless (--allow-env).
	AllowEnv []string
	// idleClose closes a backend's connection (SSH) after that long
	// without use; zero keeps it open. Only the daemon, which outlives
	// its callers, sets it.
	IdleClose time.Duration
	// owner owns the docker-image:// sandboxes this registry creates
	// (docker.Options.Owner): DaemonOwner or PrivateOwner, so that no two
	// registries share a sandbox unless its target says shared=true.
	Owner string
	// private: the registry lives as long as one command (PrivateOwner).
	Private bool
	// logMax bounds each process's log on disk (env.LogKeep): 0 means
	// $CORRAL_LOG_MAX, else env.DefaultLogMax; negative, no bound.
	LogMax int64
	// environ is the local backend's base environment (nil: this
	// process's). The daemon sets secrets.AccountEnviron: its callers send
	// their own environment, and nothing of the daemon's may reach their
	// commands.
	Environ []string
}

// dockerOwner is the owner of target's sandbox. A private registry's
// persist=true sandbox is the user's (docker.DefaultOwner), since it is
// kept for the next command to find.
func (b Options) dockerOwner(target string) string {
	if b.Private {
		if t, err := docker.ParseTarget(target); err == nil && t.Sandbox.Persist {
			return ""
		}
	}
	return b.Owner
}

// DaemonOwner is the sandbox owner of the daemon whose state lives in
// stateDir: a daemon restarted on that directory finds its sandboxes
// again, and one with another HOME has its own.
func DaemonOwner(stateDir string) string {
	if abs, err := filepath.Abs(stateDir); err == nil {
		stateDir = abs
	}
	return docker.OwnerFor("daemon " + stateDir)
}

// PrivateOwner is the sandbox owner of a registry that lives as long as
// one command (--no-daemon, an in-process MCP or ACP front end): nobody
// else may use or remove its sandboxes, and it never re-attaches.
func PrivateOwner() string {
	return docker.OwnerFor(fmt.Sprintf("process %d %s", os.Getpid(), rand.Text()))
}

// Open is the registry's Config.Open: it resolves a target to an
// Environment. Sandboxes (containers, hosts) are configured the way their
// own tools are: the Docker context and DOCKER_HOST, ~/.ssh/config,
// known_hosts and the agent.
func (b Options) Open(ctx context.Context, target string) (env.Environment, error) {
	if err := Check(target); err != nil {
		return nil, invalidTarget{err}
	}
	scheme, _, _ := strings.Cut(target, "://")
	var (
		e   env.Environment
		err error
	)
	logMax := b.LogMax
	if logMax == 0 {
		logMax, _ = env.LogMaxFromEnv() // a bad value: serve refuses it; elsewhere the default
	}
	switch scheme {
	case "local":
		e, err = local.New(local.Options{AllowEnv: b.AllowEnv, LogMax: logMax, Environ: b.Environ, Ceiling: b.Ceiling})
	case "docker", "docker-image":
		e, err = docker.Open(ctx, target, docker.Options{Owner: b.dockerOwner(target), LogMax: logMax})
	case "ssh":
		e, err = ssh.Open(ctx, target, ssh.Options{IdleClose: b.IdleClose, LogMax: logMax})
	case "k8s", "k8s-pod":
		e, err = plugins.OpenPlugin(ctx, K8sPlugin, target, plugins.Options{Logger: slog.Default(), Env: K8sEnviron(), Owner: b.Owner})
	default:
		e, err = plugins.Open(ctx, target, plugins.Options{Logger: slog.Default()})
	}
	if err != nil {
		return nil, err // the registry adds the target
	}
	return e, nil
}

// K8sPlugin serves k8s:// and k8s-pod:// targets: client-go lives in that
// binary only (see cmd/corral-backend-k8s).
const K8sPlugin = "k8s"

// K8sEnviron is what the Kubernetes plugin gets of corral's environment:
// where the kubeconfig is, and the in-cluster API server when corral runs
// in a pod.
func K8sEnviron() []string {
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

// WaitSandboxRemovals is what a corral that closed its registry does
// before it exits: Close of a docker-image:// sandbox returns while the
// engine deletes it (as docker run --rm leaves it), and only a wait tells
// whether a deletion failed (the container is then left, labelled, for
// the next Reap).
func WaitSandboxRemovals() {
	ctx, cancel := context.WithTimeout(context.Background(), sandboxRemovalWait)
	defer cancel()
	if err := docker.WaitRemoved(ctx); err != nil {
		slog.Warn("docker-image sandboxes may be left behind", "err", err)
	}
}

// DaemonOpen is the daemon's registry Open: its sandboxes owned by the
// daemon of stateDir, its local commands started from the account's
// environment (its callers send theirs), every local process under
// ceiling (nil: none). A ceiling the local backend cannot enforce is
// refused here, before the daemon runs, rather than at the first start;
// the probe also sets up the ceiling's cgroups.
func DaemonOpen(stateDir string, idleClose time.Duration, logMax int64, ceiling *env.Limits) (func(context.Context, string) (env.Environment, error), error) {
	if ceiling != nil {
		probe, err := local.New(local.Options{Ceiling: ceiling, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return nil, err
		}
		_ = probe.Close()
	}
	return Options{IdleClose: idleClose, Owner: DaemonOwner(stateDir), LogMax: logMax, Environ: secrets.AccountEnviron(), Ceiling: ceiling}.Open, nil
}

// PrivateOpen is the Open of a registry that lives as long as one command
// (--no-daemon, an in-process MCP or ACP front end).
func PrivateOpen(allowEnv []string) func(context.Context, string) (env.Environment, error) {
	return Options{AllowEnv: allowEnv, Owner: PrivateOwner(), Private: true}.Open
}
