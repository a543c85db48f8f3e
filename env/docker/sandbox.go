package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptrace"
	"os"
	"strings"
	"sync"
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

// DefaultOwner identifies this user on this machine in the owner label:
// uid@hostname. It owns the sandboxes of supervisors that name no owner of
// their own, and the shared=true ones.
func DefaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("%d@%s", os.Getuid(), host)
}

// OwnerFor is the owner of the supervisor identified by id (a daemon's
// state directory, say): DefaultOwner()/ and 12 hex digits of id's SHA-256,
// so that two supervisors of one user (a developer's daemon and a test
// harness's, two CI jobs) each get sandboxes of their own.
func OwnerFor(id string) string {
	sum := sha256.Sum256([]byte(id))
	return DefaultOwner() + "/" + hex.EncodeToString(sum[:6])
}

// sandbox is a container created (or found again) for a docker-image
// target.
type sandbox struct {
	cli    *client.Client
	id     string
	name   string
	target Target
	log    *slog.Logger
	// autoRemove is the container's HostConfig.AutoRemove: the engine
	// deletes it as soon as it stops (every non-persistent sandbox this
	// version creates).
	autoRemove bool
}

// ensureSandbox finds the target's container (same name, managed by corral,
// same owner and configuration) and starts it if it stopped, or creates it.
// Creation races with another supervisor are resolved by the engine's name
// uniqueness: the loser finds the winner's container. A container it
// created and could not start is removed before the error is returned.
func ensureSandbox(ctx context.Context, cli *client.Client, t Target, owner string, log *slog.Logger) (*sandbox, error) {
	name := t.containerName(owner)
	// The engine's CPU count (for the default limit) is looked up while
	// the name is: each is a round trip, neither needs the other.
	var cpus func() float64
	if t.Sandbox.CPUs == 0 {
		cpus = defaultCPUs(ctx, cli)
	}
	delay := 10 * time.Millisecond
	for attempt := 0; ; attempt++ {
		found, err := findSandbox(ctx, cli, t, name, owner)
		if err != nil {
			return nil, err
		}
		if found != nil {
			log.Info("docker: re-using sandbox", "container", name, "id", shortID(found.id))
			if err := startSandbox(ctx, cli, found.id, name); err != nil {
				return nil, err
			}
			return &sandbox{cli: cli, id: found.id, name: name, target: t, log: log, autoRemove: found.autoRemove}, nil
		}
		limit := t.Sandbox.CPUs
		if cpus != nil {
			limit = cpus()
		}
		id, err := createSandbox(ctx, cli, t, name, owner, limit)
		// Someone else is creating it: the engine reserves the name before
		// the container can be inspected, so wait for it to appear rather
		// than fail.
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
		sb := &sandbox{cli: cli, id: id, name: name, target: t, log: log, autoRemove: !t.Sandbox.Persist}
		// Just created, so neither running nor paused: no inspect first.
		if _, err := cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
			err = fmt.Errorf("docker: start sandbox %s: %w", name, err)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
			defer cancel()
			return nil, errors.Join(err, sb.forceRemove(rctx))
		}
		log.Info("docker: created sandbox", "container", name, "id", shortID(id), "image", t.Image)
		return sb, nil
	}
}

// engineCPUs caches the CPU count of each engine (by address) for the
// default CPU limit: it does not change while the engine runs, and asking
// is the slowest call of a sandbox's creation.
var engineCPUs sync.Map // daemon host → int

// defaultCPUs starts looking up the default CPU limit, DefaultCPUs capped
// at the engine's CPU count (the engine refuses a limit above it, and the
// default must work on a small machine), and returns the function that
// waits for the answer. An engine that does not say gets DefaultCPUs.
func defaultCPUs(ctx context.Context, cli *client.Client) func() float64 {
	host := cli.DaemonHost()
	if n, ok := engineCPUs.Load(host); ok {
		return func() float64 { return min(DefaultCPUs, float64(n.(int))) }
	}
	done := make(chan float64, 1)
	go func() {
		cpus := DefaultCPUs
		if info, err := cli.Info(ctx, client.InfoOptions{}); err == nil && info.Info.NCPU > 0 {
			engineCPUs.Store(host, info.Info.NCPU)
			cpus = min(cpus, float64(info.Info.NCPU))
		}
		done <- cpus
	}()
	return sync.OnceValue(func() float64 { return <-done })
}

// foundSandbox is the container findSandbox found.
type foundSandbox struct {
	id         string
	autoRemove bool
}

// findSandbox returns the container called name when it is a sandbox of
// this owner and configuration, nil when there is none, and an error naming
// the fix when the name is taken by something else. A non-persistent
// sandbox that stopped (the engine deletes it) or is being removed is
// waited for until it is gone, and then there is none.
func findSandbox(ctx context.Context, cli *client.Client, t Target, name, owner string) (*foundSandbox, error) {
	res, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, sandboxError("inspect", name, err)
	}
	c := res.Container
	var labels map[string]string
	if c.Config != nil {
		labels = c.Config.Labels
	}
	switch {
	case labels[LabelManaged] != "true":
		return nil, fmt.Errorf("docker: container %s exists and is not a corral sandbox; choose another name= or remove it (docker rm -f %s)", name, name)
	case labels[LabelOwner] != owner:
		return nil, fmt.Errorf("docker: sandbox %s belongs to %q, not %q; choose another name= or remove it (docker rm -f %s)", name, labels[LabelOwner], owner, name)
	case labels[LabelConfig] != t.configHash():
		return nil, fmt.Errorf("docker: sandbox %s was created for another image or other options (%s); choose another name= or remove it (docker rm -f %s)", name, labels[LabelTarget], name)
	}
	autoRemove := c.HostConfig != nil && c.HostConfig.AutoRemove
	st := c.State
	if st == nil {
		return &foundSandbox{id: c.ID, autoRemove: autoRemove}, nil
	}
	switch {
	case autoRemove && (st.Status == container.StateExited || st.Dead):
		// Stopped, so the engine deletes it (or, dead, could not): it is
		// disposable, a new one is made once it is gone.
		err = awaitRemoval(ctx, cli, c.ID, removalGrace)
	case st.Status == container.StateRemoving:
		err = waitGone(ctx, cli, c.ID, removalGrace)
	case st.Dead:
		err = errors.New("dead")
	default:
		return &foundSandbox{id: c.ID, autoRemove: autoRemove}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("docker: sandbox %s is being removed or dead; retry, or remove it (docker rm -f %s): %w: %w", name, name, env.ErrUnavailable, err)
	}
	return nil, nil
}

// createSandbox creates the container; a missing image is the error
// naming the fix. The engine's answer to the create says so, which spares
// an image inspect first.
func createSandbox(ctx context.Context, cli *client.Client, t Target, name, owner string, cpus float64) (string, error) {
	config, host := sandboxConfig(t, name, owner, cpus)
	created, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:       name,
		Config:     config,
		HostConfig: host,
	})
	switch {
	case err == nil:
		return created.ID, nil
	case cerrdefs.IsConflict(err):
		return "", err
	case cerrdefs.IsNotFound(err):
		if _, ierr := cli.ImageInspect(ctx, t.Image); cerrdefs.IsNotFound(ierr) {
			return "", fmt.Errorf("docker: image %q not found; build it with scripts/build-test-image.sh (for corral-test-busybox) or docker pull/import it", t.Image)
		}
	}
	return "", fmt.Errorf("docker: create sandbox %s from %s: %w", name, t.Image, err)
}

// sandboxLimits are the limits a sandbox of t runs under: its memory and
// pids, defaults included, and its CPUs when the target sets them (the
// default depends on the engine's CPU count).
func (t Target) sandboxLimits() *env.Limits {
	l := &env.Limits{Memory: t.Sandbox.Memory, CPUs: t.Sandbox.CPUs, Pids: t.Sandbox.Pids}
	if l.Memory == 0 {
		l.Memory = DefaultMemory
	}
	if l.Pids == 0 {
		l.Pids = DefaultPidsLimit
	}
	return l
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
		// A sandbox that is not kept is deleted by the engine the moment it
		// stops: Close only has to stop it, and nothing is left behind even
		// when the supervisor exits right after.
		AutoRemove:     !o.Persist,
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

// remove ends the sandbox and everything in it. A container already gone
// is not an error.
//
// A sandbox the engine deletes when it stops (AutoRemove) is stopped with
// SIGTERM — its main command exits at once, and with it PID 1 of the
// container, which takes every process in it along — and, in the same
// breath, renamed out of the way, so its name is free for the next sandbox
// of the target. remove returns once the rename is done and the signal's
// request is in the engine's hands (the engine carries it out even if
// this process exits now), with the engine deleting the container; a
// goroutine checks the signal's answer and that the container goes
// (forcing the removal when it does not), and [WaitRemoved] waits for
// that check. Any other sandbox, or one that refused the signal before
// remove returned, is force-removed before remove returns.
func (s *sandbox) remove(ctx context.Context) error {
	if !s.autoRemove {
		return s.forceRemove(ctx)
	}
	sent := make(chan struct{})
	var once sync.Once
	// The signal's answer is awaited by the check, after remove returned
	// and its caller's ctx ended.
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	kctx = httptrace.WithClientTrace(kctx, &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		if info.Err == nil {
			once.Do(func() { close(sent) })
		}
	}})
	killed := make(chan error, 1)
	go func() {
		defer cancel()
		_, err := s.cli.ContainerKill(kctx, s.id, client.ContainerKillOptions{Signal: "TERM"})
		if cerrdefs.IsNotFound(err) || (cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "not running")) {
			err = nil // stopped already: the engine deletes it
		}
		killed <- err
	}()
	_, renameErr := s.cli.ContainerRename(ctx, s.id, client.ContainerRenameOptions{NewName: closedName(s.id)})
	select {
	case <-sent:
	case err := <-killed:
		if err != nil {
			s.log.Debug("docker: stopping sandbox failed, removing it", "container", s.name, "err", err)
			return s.forceRemove(ctx)
		}
		killed <- nil
	}
	if renameErr != nil && !cerrdefs.IsNotFound(renameErr) {
		// The name was not freed (the engine was already deleting the
		// container, say): wait for the deletion, which frees it.
		if err := <-killed; err != nil {
			s.log.Debug("docker: stopping sandbox failed, removing it", "container", s.name, "err", err)
			return s.forceRemove(ctx)
		}
		if err := awaitRemoval(ctx, s.cli, s.id, removalGrace); err != nil {
			return fmt.Errorf("docker: remove sandbox %s: %w", s.name, err)
		}
		s.log.Info("docker: removed sandbox", "container", s.name)
		return nil
	}
	pending.track(s, killed)
	return nil
}

// forceRemove deletes the container in one call, killing it first if it
// runs; it returns when the container is gone.
func (s *sandbox) forceRemove(ctx context.Context) error {
	if err := removeNow(ctx, s.cli, s.id); err != nil {
		return fmt.Errorf("docker: remove sandbox %s: %w", s.name, err)
	}
	s.log.Info("docker: removed sandbox", "container", s.name)
	return nil
}

// removeNow force-removes the container (volumes included) and returns
// once it is gone; gone already is success.
func removeNow(ctx context.Context, cli *client.Client, id string) error {
	_, err := cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	switch {
	case err == nil, cerrdefs.IsNotFound(err):
		return nil
	case isRemovalInProgress(err):
		return waitGone(ctx, cli, id, closeTimeout)
	}
	return err
}

// closedName is the name a closed sandbox has while the engine deletes
// it: unique (the container's ID), and still a corral-… name for people.
func closedName(id string) string { return "corral-closed-" + shortID(id) }

// removalGrace is how long a stopped sandbox may take to be deleted by the
// engine before it is removed by force.
const removalGrace = 10 * time.Second

// awaitRemoval waits up to grace for the container to be gone, then
// removes it by force (within ctx). Gone already is success.
func awaitRemoval(ctx context.Context, cli *client.Client, id string, grace time.Duration) error {
	if err := waitGone(ctx, cli, id, grace); err == nil || ctx.Err() != nil {
		return err
	}
	return removeNow(ctx, cli, id)
}

// waitGone waits, for at most d, for the engine to report the container
// removed; a container that is not there counts as removed.
func waitGone(ctx context.Context, cli *client.Client, id string, d time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	w := cli.ContainerWait(wctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionRemoved})
	select {
	case res := <-w.Result:
		if res.Error != nil && res.Error.Message != "" {
			return fmt.Errorf("docker: wait for removal of %s: %s", shortID(id), res.Error.Message)
		}
		return nil
	case err := <-w.Error:
		if cerrdefs.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("docker: wait for removal of %s: %w", shortID(id), err)
	}
}

// pending is this process's removals in flight: sandboxes that Close
// stopped and the engine is deleting, each checked by a goroutine.
var pending removals

type removals struct {
	mu   sync.Mutex
	n    int           // removals in flight
	idle chan struct{} // closed when n drops to 0; nil while n is 0
	errs []error       // removals that failed, until WaitRemoved reports them
}

// track checks in the background that the engine stops (killed is the
// signal's answer) and deletes the sandbox s, and removes it by force
// when it does not.
func (r *removals) track(s *sandbox, killed <-chan error) {
	r.mu.Lock()
	if r.n == 0 {
		r.idle = make(chan struct{})
	}
	r.n++
	r.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), removalGrace+closeTimeout)
		defer cancel()
		var err error
		if kerr := <-killed; kerr != nil {
			s.log.Debug("docker: stopping sandbox failed, removing it", "container", s.name, "err", kerr)
			err = removeNow(ctx, s.cli, s.id)
		} else {
			err = awaitRemoval(ctx, s.cli, s.id, removalGrace)
		}
		// Close released the engine connections already; this drops the
		// ones the check opened again (the client stays usable).
		s.cli.Close()
		if err != nil {
			s.log.Error("docker: sandbox not removed", "container", s.name, "id", shortID(s.id), "err", err)
			err = fmt.Errorf("docker: remove sandbox %s (now %s): %w", s.name, closedName(s.id), err)
		} else {
			s.log.Info("docker: removed sandbox", "container", s.name)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil {
			r.errs = append(r.errs, err)
		}
		if r.n--; r.n == 0 {
			close(r.idle)
			r.idle = nil
		}
	}()
}

// wait returns a channel closed once no removal is in flight.
func (r *removals) wait() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.idle == nil {
		done := make(chan struct{})
		close(done)
		return done
	}
	return r.idle
}

// WaitRemoved waits until every sandbox closed in this process is gone
// from the engine, or ctx ends. Close of a docker-image:// Environment
// stops the sandbox and returns while the engine deletes it; a supervisor
// calls WaitRemoved before it exits, or before it checks that nothing is
// left. It returns the removals that failed since the last call (the
// containers are then left for [Reap], under the name corral-closed-ID),
// or ctx's error.
func WaitRemoved(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return fmt.Errorf("docker: wait for sandbox removals: %w", ctx.Err())
	case <-pending.wait():
	}
	pending.mu.Lock()
	defer pending.mu.Unlock()
	err := errors.Join(pending.errs...)
	pending.errs = nil
	return err
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
