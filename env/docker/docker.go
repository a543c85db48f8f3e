package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
)

// Options configure Open. The zero value works: the engine DOCKER_HOST or
// the current Docker context names, this user's owner label, slog.Default.
type Options struct {
	// Host is the engine address (unix:///var/run/docker.sock,
	// tcp://host:2376); empty means DOCKER_HOST, else the current Docker
	// context, else the library default.
	Host string
	// Owner is the dev.corral.owner label of sandboxes: who may find and
	// re-use them, and part of a sandbox's default name, so that
	// supervisors with different owners never share a sandbox (nor remove
	// each other's) unless the target says shared=true. Empty means
	// DefaultOwner() (uid@hostname); the corral daemon passes one of its
	// own, derived from its state directory (see OwnerFor).
	Owner string
	// BaseDir is the directory inside the container that holds the
	// wrapped processes' state. Empty means /tmp/.corral in a sandbox (the
	// writable tmpfs) and the nohup engine's default in docker:// targets.
	BaseDir string
	// Residents bounds the resident shells (execs with stdin attached that
	// keep the engine's library loaded) the Environment keeps in the
	// container: a call is then one request on an open stream instead of a
	// new exec. 0 means the engine's default (4); negative turns them off.
	Residents int
	// LogMax bounds each process's log inside the container
	// (nohup.Options.LogMax): 0 means env.DefaultLogMax, negative no
	// bound. An image without util-linux fallocate (busybox, alpine)
	// keeps whole logs.
	LogMax int64
	// Logger receives lifecycle events; nil means slog.Default().
	Logger *slog.Logger
}

// outputChunk is the most log bytes one poll moves. Every poll is an exec,
// which costs the engine a runtime call (tens of milliseconds), so a flood
// of output is read in bigger chunks than the engine's default.
const outputChunk = 4 << 20

// closeTimeout bounds the container removal in Close.
const closeTimeout = time.Minute

// Open returns the Environment of a docker:// or docker-image:// target
// (see the package doc). It connects to the engine and negotiates the API
// version at once, so an unreachable or too old engine fails here with a
// clear error (matching env.ErrUnavailable when unreachable).
//
// Its Name is "docker://" + the container's name for both kinds of
// target, so a Ref stays valid whichever way the sandbox is opened again.
func Open(ctx context.Context, target string, opts Options) (env.Environment, error) {
	t, err := ParseTarget(target)
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	owner := opts.Owner
	if owner == "" || t.Sandbox.Shared {
		owner = DefaultOwner()
	}
	cli, err := connect(ctx, opts.Host)
	if err != nil {
		return nil, err
	}
	var e env.Environment
	if t.Container != "" {
		e, err = openContainer(ctx, cli, t, opts, log)
	} else {
		e, err = openSandbox(ctx, cli, t, owner, opts, log)
	}
	if err != nil {
		cli.Close()
		return nil, err
	}
	return e, nil
}

// openContainer wraps an existing, running container. Close leaves the
// container alone.
func openContainer(ctx context.Context, cli *client.Client, t Target, opts Options, log *slog.Logger) (env.Environment, error) {
	res, err := cli.ContainerInspect(ctx, t.Container, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil, fmt.Errorf("docker: no container is named %s; start one under that name or pick another (docker ps -a lists them): %w", t.Container, env.ErrSandboxGone)
	}
	if err != nil {
		return nil, sandboxError("inspect", t.Container, err)
	}
	c := res.Container
	name := strings.TrimPrefix(c.Name, "/")
	switch st := c.State; {
	case st == nil:
		return nil, fmt.Errorf("docker: container %s has no state", name)
	case st.Paused:
		return nil, fmt.Errorf("docker: container %s is paused; unpause it with `docker unpause %s`: %w", name, name, env.ErrUnavailable)
	case !st.Running || st.Restarting:
		return nil, fmt.Errorf("docker: container %s is %s, not running%s; start it with `docker start %s`: %w", name, st.Status, oomWords(st), name, env.ErrSandboxGone)
	}
	log.Debug("docker: opened container", "container", name, "id", shortID(c.ID))
	return newEnv(transportFor(cli, c.ID, name), name, opts.BaseDir, opts, log, nil, func() error {
		cli.Close()
		return nil
	})
}

// openSandbox finds or creates the target's sandbox container. Close
// removes it unless persist=true.
func openSandbox(ctx context.Context, cli *client.Client, t Target, owner string, opts Options, log *slog.Logger) (env.Environment, error) {
	sb, err := ensureSandbox(ctx, cli, t, owner, log)
	if err != nil {
		return nil, err
	}
	baseDir := opts.BaseDir
	if baseDir == "" {
		baseDir = sandboxStateDir
	}
	// Kept: a persistent sandbox, and a shared one, which another
	// supervisor may be using.
	keep := t.Sandbox.Persist || t.Sandbox.Shared
	onClose := func() error {
		defer cli.Close()
		if keep {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		return sb.remove(ctx)
	}
	e, err := newEnv(transportFor(cli, sb.id, sb.name), sb.name, baseDir, opts, log, t.sandboxLimits(), onClose)
	if err != nil && !keep {
		rctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		err = errors.Join(err, sb.remove(rctx))
	}
	return e, err
}

// maxFollows bounds the follows (one exec each, streaming a process's
// output and exit) and long polls in flight per container.
const maxFollows = 64

// newEnv builds the Environment on tr; onClose runs once, after the
// engine has killed the non-detached processes.
func newEnv(tr nohup.Transport, name, baseDir string, opts Options, log *slog.Logger, sandbox *env.Limits, onClose func() error) (env.Environment, error) {
	e, err := nohup.New(tr, nohup.Options{
		SandboxLimits: sandbox,
		Name:          SchemeContainer + name,
		LimitsNote: "per-process limits inside a container need a cgroup it may write, and a container's cgroup mount is read-only; " +
			"limit the container itself: docker-image://IMAGE?memory=2G&cpus=1.5&pids=512",
		BaseDir:   baseDir,
		ChunkSize: outputChunk,
		Residents: opts.Residents,
		LogMax:    opts.LogMax,
		// An exec holds no scarce slot (unlike an ssh session): every
		// process the registry watches can have its own follow.
		MaxLongPolls: maxFollows,
		Logger:       log,
		OnClose:      onClose,
	})
	if err != nil {
		return nil, fmt.Errorf("docker: environment in %s: %w", name, err)
	}
	return e, nil
}
