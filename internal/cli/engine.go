package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/env"
)

// The corral command is thin: it links the daemon's client and nothing of
// the backends, whose SDKs (Docker, x/crypto/ssh, gRPC and protobuf for
// plugins, MCP, ACP) would cost every call their package initialisation,
// about 7 ms of a 9 ms `corral version`. What needs the backends in the
// process runs in corrald, installed beside corral: the daemon (serve), a
// run with --no-daemon, mcp, acp, doctor and backends. corral hands those
// commands to corrald whole (exec on Unix), so the user types one name.

// Engine is what a process that serves backends gives the command line:
// corrald installs it (internal/engine); the thin corral has none.
type Engine struct {
	// Check is the full check of a --backend target: its syntax, and that
	// the plugin that serves it is installed.
	Check func(target string) error
	// DaemonOpen returns the Config.Open of the daemon whose state is in
	// stateDir, configured by serve's flags; it refuses a ceiling the
	// local backend cannot enforce.
	DaemonOpen func(stateDir string, idleClose time.Duration, logMax int64, ceiling *env.Limits) (OpenFunc, error)
	// PrivateOpen returns the Open of a registry that lives as long as one
	// command (--no-daemon, --in-process).
	PrivateOpen func(allowEnv []string) OpenFunc
	// WaitSandboxRemovals waits, bounded, for the sandboxes a closed
	// registry is deleting.
	WaitSandboxRemovals func()
	// Commands are the engine's own commands (mcp, acp, doctor, backends);
	// each replaces the stand-in of its name.
	Commands func(stdin io.Reader, stdout, stderr io.Writer) []*cobra.Command
}

// OpenFunc resolves a backend target to an Environment (registry.Config's
// Open).
type OpenFunc = func(ctx context.Context, target string) (env.Environment, error)

// engine is set once, before Main, by corrald (SetEngine); nil in corral.
var engine *Engine

// SetEngine installs e for the commands that need the backends.
func SetEngine(e *Engine) { engine = e }

// engineName is the binary that serves the backends, beside corral.
const engineName = "corrald"

// engineCommands are the commands only corrald runs: the thin corral
// lists them in its help and hands them over whole.
var engineCommands = []struct{ name, short string }{
	{"mcp", "Serve the terminal and process tools to an MCP client (stdio or loopback HTTP)"},
	{"acp", "Proxy an ACP agent for an editor, serving its terminals from corral on any backend"},
	{"doctor", "Check what this machine supports (daemon, cgroup kill, PTY, Docker, ssh-agent, Kubernetes, plugins) and what the daemon holds open"},
	{"backends", "List the built-in backends and the installed backend plugins"},
}

// EngineShort is the one-line help of engine command name, the same in
// corral's help and corrald's.
func EngineShort(name string) string {
	for _, c := range engineCommands {
		if c.name == name {
			return c.short
		}
	}
	return ""
}

// engineStandIns are the thin corral's stand-ins for engineCommands.
func engineStandIns(args []string, stdout, stderr io.Writer) []*cobra.Command {
	out := make([]*cobra.Command, 0, len(engineCommands))
	for _, c := range engineCommands {
		cmd := &cobra.Command{
			Use:                c.name,
			Short:              c.short,
			DisableFlagParsing: true,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return handOver(c.name, args, stdout, stderr)
			},
		}
		// corral help mcp: the help is corrald's, which knows the flags.
		cmd.SetHelpFunc(func(*cobra.Command, []string) {
			if err := handOver(c.name, []string{c.name, "--help"}, stdout, stderr); err != nil {
				fmt.Fprintf(stderr, "corral: %s\n", err)
			}
		})
		out = append(out, cmd)
	}
	return out
}

// enginePath finds corrald: beside this binary (make build, go install
// ./cmd/...), else on PATH.
func enginePath() (string, error) {
	name := engineName
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		p := filepath.Join(filepath.Dir(exe), name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s is not beside corral nor on PATH: install both with go install github.com/corralhq/corral/cmd/...@latest (or make build)", engineName)
}

// selfOrEngine is the binary that runs `serve`: this one when it has the
// engine (corrald), else corrald.
func selfOrEngine() (string, error) {
	if engine != nil {
		return os.Executable()
	}
	return enginePath()
}

// handOver runs the command line args in corrald, which replaces this
// process where the system allows it: its exit is the command's.
func handOver(what string, args []string, stdout, stderr io.Writer) error {
	path, err := enginePath()
	if err != nil {
		return &exitError{code: exitCorralError, msg: what + ": " + err.Error()}
	}
	code, err := execEngine(path, args, stdout, stderr)
	if err != nil {
		return &exitError{code: exitCorralError, msg: fmt.Sprintf("%s: run %s: %v", what, path, err)}
	}
	if code != 0 {
		return &exitError{code: code}
	}
	return nil
}
