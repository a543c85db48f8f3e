package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/corralhq/corral/env"
)

// Labels put on every sandbox container this package creates.
const (
	LabelManaged = "dev.corral.managed" // "true"
	LabelOwner   = "dev.corral.owner"   // Options.Owner
	LabelConfig  = "dev.corral.config"  // hash of image and options
	LabelPersist = "dev.corral.persist" // "true" when persist=true
	LabelTarget  = "dev.corral.target"  // the canonical target, for people
)

// Capabilities is the set a sandbox keeps: everything else is dropped.
// Enough for a build as root (chown, files of other users, su to an
// unprivileged user, kill its own processes), nothing that reaches the
// kernel or the network stack.
var Capabilities = []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL"}

// keepAlive is the sandbox's main command: it idles, needs only a POSIX sh
// (busybox has no `sleep infinity`), and exits at once on SIGTERM so that
// stopping the container takes no grace period.
const keepAlive = `trap "exit 0" TERM; while :; do sleep 3600 & wait; done`

// sandboxStateDir is where the nohup engine keeps its per-process state in
// a sandbox: on the /tmp tmpfs, the one place writable with readonly=true.
const sandboxStateDir = "/tmp/.corral"

// DefaultOwner identifies this supervisor in the owner label: uid@hostname.
func DefaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("%d@%s", os.Getuid(), host)
}

// sandbox is a container created (or found again) for a docker-image
// target.
type sandbox struct {
	cli    *client.Client
	id     string
	name   string
	target Target
	log    *slog.Logger
}

// ensureSandbox finds the target's container (same name, managed by corral,
// same owner and configuration) and starts it if it stopped, or creates it.
// Creation races with another supervisor are resolved by the engine's name
// uniqueness: the loser finds the winner's container.
func ensureSandbox(ctx context.Context, cli *client.Client, t Target, owner string, log *slog.Logger) (*sandbox, error) {
	name := t.containerName(owner)
	delay := 10 * time.Millisecond
	for attempt := 0; ; attempt++ {
		id, err := findSandbox(ctx, cli, t, name, owner)
		if err != nil {
			return nil, err
		}
		if id == "" {
			id, err = createSandbox(ctx, cli, t, name, owner)
			// Someone else is creating it: the engine reserves the name
			// before the container can be inspected, so wait for it to
			// appear rather than fail.
			if cerrdefs.IsConflict(err) && attempt < 40 {
				select {
				case <-ctx.Done():
					return nil, fmt.Errorf("docker: sandbox %s: %w", name, ctx.Err())
				case <-time.After(delay):
				}
				delay = min(2*delay, 250*time.Millisecond)
				continue
			}
			if err != nil {
				return nil, err
			}
			log.Info("docker: created sandbox", "container", name, "id", shortID(id), "image", t.Image)
		} else {
			log.Info("docker: re-using sandbox", "container", name, "id", shortID(id))
		}
		if err := startSandbox(ctx, cli, id, name); err != nil {
			return nil, err
		}
		return &sandbox{cli: cli, id: id, name: name, target: t, log: log}, nil
	}
}

// findSandbox returns the ID of the container called name when it is a
// sandbox of this owner and configuration, "" when there is none, and an
// error naming the fix when the name is taken by something else.
func findSandbox(ctx context.Context, cli *client.Client, t Target, name, owner string) (string, error) {
	res, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", sandboxError("inspect", name, err)
	}
	c := res.Container
	var labels map[string]string
	if c.Config != nil {
		labels = c.Config.Labels
	}
	switch {
	case labels[LabelManaged] != "true":
		return "", fmt.Errorf("docker: container %s exists and is not a corral sandbox; choose another name= or remove it (docker rm -f %s)", name, name)
	case labels[LabelOwner] != owner:
		return "", fmt.Errorf("docker: sandbox %s belongs to %q, not %q; choose another name= or remove it (docker rm -f %s)", name, labels[LabelOwner], owner, name)
	case labels[LabelConfig] != t.configHash():
		return "", fmt.Errorf("docker: sandbox %s was created for another image or other options (%s); choose another name= or remove it (docker rm -f %s)", name, labels[LabelTarget], name)
	}
	if c.State != nil && (c.State.Status == container.StateRemoving || c.State.Dead) {
		return "", fmt.Errorf("docker: sandbox %s is being removed or dead; retry, or remove it (docker rm -f %s): %w", name, name, env.ErrUnavailable)
	}
	return c.ID, nil
}

func createSandbox(ctx context.Context, cli *client.Client, t Target, name, owner string) (string, error) {
	if _, err := cli.ImageInspect(ctx, t.Image); err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", fmt.Errorf("docker: image %q not found; build it with scripts/build-test-image.sh (for corral-test-busybox) or docker pull/import it", t.Image)
		}
		return "", sandboxError("inspect image", t.Image, err)
	}
	cpus := t.Sandbox.CPUs
	if cpus == 0 {
		cpus = DefaultCPUs
		// The engine refuses a limit above its CPU count; the default must
		// work on a small machine.
		if info, err := cli.Info(ctx, client.InfoOptions{}); err == nil && info.Info.NCPU > 0 {
			cpus = min(cpus, float64(info.Info.NCPU))
		}
	}
	config, host := sandboxConfig(t, name, owner, cpus)
	created, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:       name,
		Config:     config,
		HostConfig: host,
	})
	if err != nil {
		if cerrdefs.IsConflict(err) {
			return "", err
		}
		return "", fmt.Errorf("docker: create sandbox %s from %s: %w", name, t.Image, err)
	}
	return created.ID, nil
}

// sandboxConfig is the hardened container configuration of a sandbox (see
// the package doc for each choice).
func sandboxConfig(t Target, name, owner string, cpus float64) (*container.Config, *container.HostConfig) {
	o := t.Sandbox
	memory := o.Memory
	if memory == 0 {
		memory = DefaultMemory
	}
	pids := o.Pids
	if pids == 0 {
		pids = DefaultPidsLimit
	}
	persist := "false"
	if o.Persist {
		persist = "true"
	}
	config := &container.Config{
		Image:    t.Image,
		Cmd:      []string{"/bin/sh", "-c", keepAlive},
		User:     o.User,
		Hostname: hostname(name),
		Labels: map[string]string{
			LabelManaged: "true",
			LabelOwner:   owner,
			LabelConfig:  t.configHash(),
			LabelPersist: persist,
			LabelTarget:  t.String(),
		},
	}
	init := true
	host := &container.HostConfig{
		Init:           &init,
		CapDrop:        []string{"ALL"},
		CapAdd:         Capabilities,
		SecurityOpt:    []string{"no-new-privileges:true"},
		ReadonlyRootfs: o.ReadOnly,
		Tmpfs:          map[string]string{"/tmp": "rw,nosuid,nodev,size=" + DefaultTmpfsSize + ",mode=1777"},
		Resources: container.Resources{
			Memory:     memory,
			MemorySwap: memory, // no swap beyond the memory limit
			NanoCPUs:   int64(cpus * 1e9),
			PidsLimit:  &pids,
		},
	}
	if o.Network != "" {
		host.NetworkMode = container.NetworkMode(o.Network)
	}
	if o.Workspace != "" {
		host.Mounts = []mount.Mount{{Type: mount.TypeBind, Source: o.Workspace, Target: "/workspace"}}
		config.WorkingDir = "/workspace"
	}
	return config, host
}

// hostname keeps the container's hostname within the 63 bytes a label may
// have.
func hostname(name string) string {
	name = strings.ReplaceAll(name, "_", "-")
	name = strings.ReplaceAll(name, ".", "-")
	if len(name) > 63 {
		name = name[:63]
	}
	return strings.Trim(name, "-")
}

func startSandbox(ctx context.Context, cli *client.Client, id, name string) error {
	res, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return sandboxError("inspect", name, err)
	}
	if st := res.Container.State; st != nil && st.Running && !st.Paused {
		return nil
	}
	if st := res.Container.State; st != nil && st.Paused {
		return fmt.Errorf("docker: sandbox %s is paused; unpause it (docker unpause %s): %w", name, name, env.ErrUnavailable)
	}
	if _, err := cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("docker: start sandbox %s: %w", name, err)
	}
	return nil
}

// remove deletes the sandbox container with everything in it. A container
// already gone is not an error.
func (s *sandbox) remove(ctx context.Context) error {
	_, err := s.cli.ContainerRemove(ctx, s.id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) && !isRemovalInProgress(err) {
		return fmt.Errorf("docker: remove sandbox %s: %w", s.name, err)
	}
	s.log.Info("docker: removed sandbox", "container", s.name)
	return nil
}

func isRemovalInProgress(err error) bool {
	return cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "already in progress")
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// ReapOptions selects the sandboxes Reap removes.
type ReapOptions struct {
	// Host is the engine address; empty means DOCKER_HOST or the current
	// Docker context.
	Host string
	// Owner limits reaping to sandboxes of this owner; empty means
	// DefaultOwner(), "*" means every owner.
	Owner string
	// Keep lists container names or IDs still in use (by a registry that
	// knows its live environments); they are left alone.
	Keep []string
	// IncludePersistent also removes sandboxes created with persist=true.
	IncludePersistent bool
	// Logger receives one line per removed container; nil means
	// slog.Default().
	Logger *slog.Logger
}

// Reap removes orphaned sandbox containers: those labelled
// dev.corral.managed=true (and of the chosen owner) that are not in Keep.
// Persistent ones are kept unless IncludePersistent. It returns the names
// of the containers removed; on error, those removed so far.
func Reap(ctx context.Context, opts ReapOptions) ([]string, error) {
	cli, err := connect(ctx, opts.Host)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	return reap(ctx, cli, opts)
}

func reap(ctx context.Context, cli *client.Client, opts ReapOptions) ([]string, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	owner := opts.Owner
	if owner == "" {
		owner = DefaultOwner()
	}
	filters := make(client.Filters).Add("label", LabelManaged+"=true")
	if owner != "*" {
		filters.Add("label", LabelOwner+"="+owner)
	}
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: filters})
	if err != nil {
		return nil, sandboxError("list", "sandboxes", err)
	}
	keep := make(map[string]bool, len(opts.Keep))
	for _, k := range opts.Keep {
		keep[strings.TrimPrefix(k, "/")] = true
	}
	var removed []string
	var errs []error
	for _, c := range list.Items {
		name := shortID(c.ID)
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		if keep[name] || keep[c.ID] || keep[shortID(c.ID)] {
			continue
		}
		if c.Labels[LabelPersist] == "true" && !opts.IncludePersistent {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err := cli.ContainerRemove(rctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		cancel()
		if err != nil && !cerrdefs.IsNotFound(err) && !isRemovalInProgress(err) {
			errs = append(errs, fmt.Errorf("docker: reap %s: %w", name, err))
			continue
		}
		log.Info("docker: reaped sandbox", "container", name, "owner", c.Labels[LabelOwner])
		removed = append(removed, name)
	}
	return removed, errors.Join(errs...)
}
