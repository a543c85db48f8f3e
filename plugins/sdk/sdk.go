// Package sdk turns an env.Environment into a corral backend plugin.
//
// A backend plugin is an executable named corral-backend-NAME, found by
// corral on CORRAL_PLUGIN_PATH (colon-separated directories) or in
// ~/.local/share/corral/plugins. A target NAME://anything selects it: corral
// starts the binary (through hashicorp/go-plugin: magic-cookie handshake,
// protocol version negotiation, gRPC over mutual TLS), calls Open with the
// whole target string, and drives the Environment it returns over gRPC.
// One plugin process serves one Environment.
//
// # Writing a plugin
//
// A complete plugin is a main package that calls [Serve]:
//
//	func main() {
//		sdk.Serve(sdk.Plugin{
//			Name:    "mybackend",
//			Version: "1.0.0",
//			Open: func(ctx context.Context, target string) (env.Environment, error) {
//				return mybackend.New(target)
//			},
//		})
//	}
//
// Build it as corral-backend-mybackend, put it in a plugin directory, and
// `corral run --backend mybackend://whatever -- make test` uses it;
// `corral backends` lists it with its version and health.
//
// A backend that can only run shell scripts inside its sandbox (a VM, a
// container runtime, a remote agent) implements nohup.Transport — one Exec
// method — and calls [ServeTransport]; env/nohup then provides processes,
// output by offset, stdin, whole-tree signals, re-attach and exit status.
// Read the contract on nohup.Transport before designing the sandbox: every
// Exec must reach the same long-lived sandbox, what a script leaves running
// must outlive it, and the sandbox's PID 1 must reap orphans. [ScriptExit]
// gives Exec its exit code; [Plugin.Capabilities] (from
// [EngineCapabilities]) states what the sandbox changes, for the
// Environments and for `corral backends` and `corral doctor`.
//
// docs/plugins.md in the corral repository is the author's guide: a
// minimal ServeTransport plugin, the contract, the working directory
// (plugins.WorkDir when the user gives no --dir), BaseDir stability,
// capabilities, testing with env/envtest (Config.OwnSandbox for a sandbox
// per Environment) and troubleshooting.
//
// A sandbox that lives in a host process (the init of a bwrap sandbox, a
// VM monitor) is recorded as a [HostProcess] — PID and start time — so a
// restarted plugin finds it again and never mistakes a process that
// inherited the PID for it (see the bwrap example).
//
// # The contract
//
// The Environment must honour env.Environment as documented there, and
// pass the conformance suite: run env/envtest against the Environment
// directly, and against the built plugin through plugins.Open (see
// plugins/examples for both).
//
// Errors keep their meaning across the process boundary: an error matching
// env.ErrNotFound, env.ErrUnsupported, env.ErrSandboxGone, env.ErrReleased,
// env.ErrExited, env.ErrStdinClosed, env.ErrUnavailable, or a
// *env.SpecError (with ErrDirNotFound), matches the same sentinel on the
// host. Other errors arrive as their text.
//
// # Lifecycle, crashes, logs
//
// The plugin's environment is minimal: corral passes PATH, HOME and the
// variables its user configured explicitly — never the host's whole
// environment, so credentials do not leak into plugins. Read configuration
// from the target string.
//
// When the host dies, the plugin notices (its parent process changes) and
// closes the Environment — killing processes that were not detached — and
// exits. When the plugin dies, corral starts a new plugin process, calls
// Open with the same target and re-attaches the detached processes by
// their Refs: make every process you can detachable (Capabilities.Reattach)
// if processes must survive a plugin crash.
//
// Log with log/slog: Serve installs a default logger whose records reach
// corral's log, tagged with the plugin's name. Never write to stdout: it
// carries the go-plugin handshake.
package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
	"github.com/corralhq/corral/plugins/internal/wire"
)

// Plugin describes a backend plugin.
type Plugin struct {
	// Name is the backend's scheme: the plugin binary is
	// corral-backend-Name and targets are Name://…
	Name string
	// Version is the plugin's version, shown by `corral backends`.
	Version string
	// Description is one line for `corral backends`.
	Description string
	// Open returns the Environment for target (the whole target string,
	// scheme included). ctx bounds only the opening.
	Open func(ctx context.Context, target string) (env.Environment, error)
	// Capabilities, when set, states what the plugin's Environments
	// support: `corral backends` and `corral doctor` show it, notes
	// included, without opening a target. With ServeTransport it also
	// replaces the engine's own capabilities in every Environment: start
	// from EngineCapabilities and say what the sandbox changes, e.g. a
	// TreeKill of "pid-namespace" and a note when Close kills the whole
	// namespace. The engine still turns PTY, Resize and ReattachPTY off
	// (with its note) once it found that the sandbox cannot give a
	// terminal. Nil: ServeTransport states the engine's own; Serve states
	// nothing, and the Environment's Capabilities count once opened.
	Capabilities *env.Capabilities
}

// LogLevelEnv is the variable through which the host asks for a log level
// ("trace", "debug", "info", "warn", "error"); default info.
const LogLevelEnv = "CORRAL_PLUGIN_LOG_LEVEL"

// Serve serves p as a go-plugin plugin on stdin/stdout and never returns.
// Run by hand (without corral's handshake) it prints a notice and exits.
func Serve(p Plugin) {
	logger := hclog.New(&hclog.LoggerOptions{
		Name:       p.Name,
		Level:      hclog.LevelFromString(os.Getenv(LogLevelEnv)),
		Output:     os.Stderr,
		JSONFormat: true,
	})
	if logger.GetLevel() == hclog.NoLevel {
		logger.SetLevel(hclog.Info)
	}
	slog.SetDefault(slog.New(wire.SlogToHCLog(logger)))

	// Once the host is gone, writing a log line to its stderr pipe raises
	// SIGPIPE, which would end the plugin before it cleaned up. A caught
	// signal (unlike an ignored one) is reset to the default in the
	// commands the plugin starts.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)

	srv := newServer(p)
	go watchParent(os.Getppid(), func() {
		err := srv.closeEnv()
		slog.Warn("corral host exited; closed the environment", "err", err)
		os.Exit(0)
	})
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  wire.Handshake,
		VersionedPlugins: wire.PluginSets(srv),
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, wire.ServerOptions()...)...)
		},
		Logger: logger,
	})
}

// parentPollInterval is how often a plugin checks that its host lives.
// go-plugin hands the plugin the host's own stdin, so no EOF tells it that
// the host is gone; being re-parented (to init or a subreaper) does.
const parentPollInterval = 250 * time.Millisecond

func watchParent(ppid int, gone func()) {
	for {
		if ppid == 1 || os.Getppid() != ppid {
			gone()
			return
		}
		time.Sleep(parentPollInterval)
	}
}

// TransportOpener returns the Transport for target and the engine's
// options (Name, BaseDir, OnClose, …; Logger defaults to the plugin's).
type TransportOpener func(ctx context.Context, target string) (nohup.Transport, nohup.Options, error)

// ServeTransport serves a backend that brings only a nohup.Transport: the
// env/nohup engine runs every process detached inside the sandbox. The
// engine runs in the plugin process and calls the transport directly, so a
// transport that is also a nohup.ShellTransport gets resident shells
// (nohup.Options.Residents) with nothing more crossing the plugin
// boundary. p.Open is ignored.
func ServeTransport(p Plugin, open TransportOpener) {
	p.Open = p.transportEnvironment(open)
	if p.Capabilities == nil {
		c := EngineCapabilities()
		p.Capabilities = &c
	}
	Serve(p)
}

// transportEnvironment is TransportEnvironment reporting p.Capabilities,
// when set, instead of the engine's.
func (p Plugin) transportEnvironment(open TransportOpener) func(context.Context, string) (env.Environment, error) {
	newEnv := TransportEnvironment(open)
	if p.Capabilities == nil {
		return newEnv
	}
	caps := *p.Capabilities
	return func(ctx context.Context, target string) (env.Environment, error) {
		e, err := newEnv(ctx, target)
		if err != nil {
			return nil, err
		}
		return &statedEnv{Env: e.(*nohup.Env), caps: caps}, nil
	}
}

// statedEnv is an engine Environment reporting the capabilities its plugin
// states. Embedding keeps every other method of *nohup.Env, the optional
// interfaces (env.ConnReporter, …) included.
type statedEnv struct {
	*nohup.Env
	caps env.Capabilities
}

// Capabilities returns the stated capabilities, with what the engine
// learnt about the sandbox since (no terminal program: PTY off, and the
// engine's note saying so; no HTTP client: CheckURL off).
func (s *statedEnv) Capabilities() env.Capabilities {
	c := s.caps
	c.Notes = append([]string(nil), s.caps.Notes...)
	engine := s.Env.Capabilities()
	if !engine.CheckURL {
		// The sandbox was found to have no HTTP client.
		c.CheckURL = false
	}
	if !engine.PTY {
		c.PTY, c.Resize, c.ReattachPTY = false, false, false
		defaults := EngineCapabilities().Notes
		for _, n := range engine.Notes {
			if !slices.Contains(defaults, n) {
				c.Notes = append(c.Notes, n)
			}
		}
	}
	return c
}

// EngineCapabilities returns what the env/nohup engine reports for a
// sandbox it has not asked anything yet: the starting point of a
// ServeTransport plugin's Plugin.Capabilities.
func EngineCapabilities() env.Capabilities {
	e, err := nohup.New(noTransport{}, nohup.Options{})
	if err != nil {
		panic("sdk: " + err.Error()) // cannot happen: the options are the defaults
	}
	defer e.Close()
	return e.Capabilities()
}

// noTransport is the Transport of the Env that EngineCapabilities asks:
// Capabilities runs no script.
type noTransport struct{}

func (noTransport) Exec(context.Context, string, io.Reader, io.Writer, io.Writer) (int, error) {
	return -1, fmt.Errorf("sdk: no transport: %w", env.ErrUnsupported)
}

// ScriptExit returns what nohup.Transport.Exec returns for a script run by
// a local program (sh, nsenter, a runtime's exec client) once its Run or
// Wait returned err: the script's exit code, or 128+N when signal N killed
// it, with a nil error; or -1 and err itself when the program did not run
// to an end (it could not be started, or its output could not be copied).
//
//	cmd := exec.CommandContext(ctx, "nsenter", args...)
//	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
//	err := cmd.Run()
//	if ctx.Err() != nil {
//		return -1, ctx.Err() // cut short: the result is unknown
//	}
//	return sdk.ScriptExit(err)
func ScriptExit(err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return -1, err
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ee.ExitCode(), nil
}

// TransportEnvironment adapts a TransportOpener to Plugin.Open, for plugins
// (and their tests) that build the Environment themselves.
func TransportEnvironment(open TransportOpener) func(context.Context, string) (env.Environment, error) {
	return func(ctx context.Context, target string) (env.Environment, error) {
		t, opts, err := open(ctx, target)
		if err != nil {
			return nil, err
		}
		if opts.Name == "" {
			opts.Name = target
		}
		if opts.Logger == nil {
			opts.Logger = slog.Default()
		}
		return nohup.New(t, opts)
	}
}

// Owner returns the supervisor the host names for the sandboxes a plugin
// creates (plugins.Options.Owner; corral's daemon names itself), or ""
// when it named none: label sandboxes with it, so that a restarted daemon
// finds its own again and leaves other daemons' alone.
func Owner() string { return os.Getenv(wire.OwnerEnv) }

// Scheme returns the NAME of a NAME://… target, or "" when target has none.
func Scheme(target string) string {
	name, _, ok := strings.Cut(target, "://")
	if !ok {
		return ""
	}
	return name
}
