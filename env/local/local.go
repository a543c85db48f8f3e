package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local/secrets"
)

// OutputGrace is how long output from descendants that still hold the
// output pipe or terminal is collected after the process itself exited.
const OutputGrace = time.Second

// Options configures an Env. The zero value works.
type Options struct {
	// StateDir holds the directories of detached processes. Default:
	// $XDG_STATE_HOME/corral/local, else ~/.local/state/corral/local.
	// It is created with mode 0700.
	StateDir string

	// AllowEnv names secret-looking variables (see secrets.FilterSecrets and
	// docs/backends.md) of the base environment that are passed on
	// nevertheless.
	AllowEnv []string

	// Environ is the base environment of a command whose Spec has no
	// Environ (the caller's); nil means os.Environ(). It is always
	// filtered: secret-looking variables not named in AllowEnv are
	// dropped. Spec.Environ, when given, replaces it, as given; Spec.Env
	// is applied on top, unfiltered. A supervisor that serves other
	// callers sets secrets.AccountEnviron here, so that nothing of its own
	// environment reaches their commands.
	Environ []string

	// DisableCgroup forces the process-group-plus-scan tree kill even where
	// cgroup v2 is usable.
	DisableCgroup bool

	// LogMax bounds a detached process's log on disk (see env.LogKeep):
	// past it, the middle of the log is dropped behind the output stream.
	// 0 means env.DefaultLogMax, a negative value no bound.
	LogMax int64

	// Ceiling, when set, holds every process this Env starts under one
	// parent cgroup with these limits, so many processes, each under its
	// own limits or none, cannot add up past it (corral serve --max-memory,
	// --max-cpus, --max-pids). New fails when the host cannot enforce it.
	Ceiling *env.Limits

	// Logger receives diagnostics; nil means slog.Default().
	Logger *slog.Logger
}

// Env is the local machine as an env.Environment. Create it with New.
type Env struct {
	log      *slog.Logger
	stateDir string
	baseEnv  []string
	sys      *system
	shim     shimClient
	hub      dirHub
	oom      oomFinder
	// logHead and logTail are the parts of a detached log kept on disk
	// (env.LogKeep); zero: no bound.
	logHead, logTail int64

	mu       sync.Mutex
	closed   bool
	children map[*child]struct{}
	handles  map[*detached]struct{}
}

var _ env.Environment = (*Env)(nil)

// New returns the local Environment. It creates the state directory and
// probes the tree-kill mechanism once.
func New(opts Options) (*Env, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("env", "local")
	stateDir := opts.StateDir
	if stateDir == "" {
		var err error
		if stateDir, err = defaultStateDir(); err != nil {
			return nil, fmt.Errorf("local: state directory: %w", err)
		}
	}
	stateDir, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, fmt.Errorf("local: state directory %q: %w", stateDir, err)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("local: create state directory: %w", err)
	}
	environ := opts.Environ
	if environ == nil {
		environ = os.Environ()
	}
	base := secrets.FilterSecrets(environ, opts.AllowEnv)
	base = dropVars(base, func(name string) bool { return name == shimEnvVar })
	sys, err := newSystem(opts.DisableCgroup, log)
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	if opts.Ceiling != nil && !opts.Ceiling.IsZero() {
		if err := opts.Ceiling.Validate(); err != nil {
			return nil, fmt.Errorf("local: ceiling: %w", err)
		}
		if err := sys.setCeiling(stateDir, *opts.Ceiling); err != nil {
			return nil, fmt.Errorf("local: ceiling (%s): %w", opts.Ceiling, err)
		}
	}
	head, tail := env.LogKeep(opts.LogMax)
	return &Env{
		log:      log,
		logHead:  head,
		logTail:  tail,
		stateDir: stateDir,
		baseEnv:  base,
		sys:      sys,
		shim:     shimClient{stateDir: stateDir},
		children: make(map[*child]struct{}),
		handles:  make(map[*detached]struct{}),
	}, nil
}

func defaultStateDir() (string, error) {
	if x := os.Getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "corral", "local"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".local", "state", "corral", "local"), nil
}

// Name returns "local".
func (e *Env) Name() string { return "local" }

// Capabilities reports what this machine supports; TreeKill depends on
// whether cgroup v2 was found usable.
func (e *Env) Capabilities() env.Capabilities { return e.sys.capabilities() }

// Start starts spec.Command as /bin/sh -c in a new session.
func (e *Env) Start(ctx context.Context, spec env.Spec) (env.Process, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("local: start: %w", err)
	}
	if err := checkDir(spec.Dir); err != nil {
		return nil, fmt.Errorf("local: start: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("local: start: %w", err)
	}
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("local: start: %w", env.ErrReleased)
	}
	if spec.Detach {
		d, err := e.startDetached(ctx, spec)
		if err != nil {
			return nil, err
		}
		return d, nil
	}
	c, err := e.startChild(spec)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func checkDir(dir string) error {
	if dir == "" {
		return nil
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &env.SpecError{Field: "Dir", Value: dir, Reason: "no such directory", Err: env.ErrDirNotFound}
	case err != nil:
		return &env.SpecError{Field: "Dir", Value: dir, Reason: err.Error(), Err: env.ErrDirNotFound}
	case !fi.IsDir():
		return &env.SpecError{Field: "Dir", Value: dir, Reason: "not a directory", Err: env.ErrDirNotFound}
	}
	return nil
}

// commandEnv is the environment a command gets: the caller's
// (spec.Environ) when it sent one, else the filtered base, plus spec.Env,
// one entry per name (later entries win). The shim variable is never
// passed on, even when a Spec names it: it would turn a corral binary run
// by the command into a shim.
func (e *Env) commandEnv(spec env.Spec) []string {
	base := e.baseEnv
	if spec.Environ != nil {
		base = spec.Environ
	}
	out := make([]string, 0, len(base)+len(spec.Env)+1)
	out = append(out, base...)
	out = append(out, spec.Env...)
	return dedupEnv(dropVars(out, func(name string) bool { return name == shimEnvVar }))
}

// dedupEnv keeps the last entry of each name, in the place of the first.
// os/exec does the same for a plain start, but the shim starts commands
// with syscall.ForkExec, which passes duplicates on: a C program's getenv
// would then see the first (the base's) value, not the caller's.
func dedupEnv(environ []string) []string {
	last := make(map[string]int, len(environ))
	for i, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		last[name] = i
	}
	if len(last) == len(environ) {
		return environ
	}
	out := environ[:0:0]
	for i, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if j, ok := last[name]; ok {
			if j != i {
				kv = environ[j]
			}
			out = append(out, kv)
			delete(last, name)
		}
	}
	return out
}

// Attach re-attaches to a detached process from its Ref.
func (e *Env) Attach(ctx context.Context, ref env.Ref) (env.Process, error) {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("local: attach: %w", env.ErrReleased)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("local: attach: %w", err)
	}
	d, err := e.attach(ref)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// Close kills every process started without Detach (whole tree), waits for
// them briefly, releases every handle and disconnects from the shim
// server. Detached processes keep running.
func (e *Env) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	children := make([]*child, 0, len(e.children))
	for c := range e.children {
		children = append(children, c)
	}
	handles := make([]*detached, 0, len(e.handles))
	for d := range e.handles {
		handles = append(handles, d)
	}
	e.mu.Unlock()

	var errs []error
	for _, c := range children {
		if err := c.kill(); err != nil {
			errs = append(errs, err)
		}
	}
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for _, c := range children {
		select {
		case <-c.finished:
		case <-deadline.C:
			errs = append(errs, fmt.Errorf("local: close: process %d did not end after SIGKILL", c.pid))
			deadline.Reset(0)
		}
		// SIGKILL is delivered at once but processes die asynchronously:
		// wait (bounded) until nothing of the tree is left, so that Close
		// returning means the trees are gone.
		if err := c.awaitEmpty(deadline.C); err != nil {
			errs = append(errs, err)
			deadline.Reset(0)
		}
		_ = c.Release()
	}
	for _, d := range handles {
		_ = d.Release()
	}
	// Let go of the shim server: it leaves once it runs nothing more.
	e.shim.close()
	e.hub.close()
	// The ceiling's cgroups go with their supervisor, unless processes
	// (detached ones) still run in them.
	e.sys.dropCeiling()
	return errors.Join(errs...)
}

func (e *Env) forget(c *child) {
	e.mu.Lock()
	delete(e.children, c)
	e.mu.Unlock()
}

// newID returns 16 random hex digits: process directory names, cgroup
// names and tree tags.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func dropVars(environ []string, drop func(name string) bool) []string {
	out := environ[:0:0]
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !drop(name) {
			out = append(out, kv)
		}
	}
	return out
}

// shimEnvVar, when set, turns any binary importing this package into the
// shim of a detached process (see the package documentation). It is never
// passed on to commands.
const shimEnvVar = secrets.ShimVar
