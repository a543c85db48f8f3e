package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
)

// Exit codes shared by the subcommands; see the package comment.
const (
	// exitFailure: what was asked for did not happen (wait --ready: the
	// process ended first; kill --port: corral does not own the port).
	exitFailure     = 1
	exitUsage       = 2
	exitTimeout     = 124
	exitCorralError = 125
)

// exitError ends the command with code, printing msg (if any) as one line
// on stderr. Every error a subcommand returns on purpose is an exitError;
// anything else cobra returns is a usage error (bad flag, unknown command).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &exitError{code: exitUsage, msg: fmt.Sprintf(format, args...)}
}

// Main runs the corral command line with args (without the program name)
// and returns the process exit code. Separated from main so tests can run
// the command in-process.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCommand(args, stdin, stdout, stderr)
	root.SetArgs(args)
	// Every command's Context is then this one, never nil.
	err := root.ExecuteContext(context.Background())
	if err == nil {
		return 0
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		// Cobra's own errors: unknown command, flag parsing.
		ee = &exitError{code: exitUsage, msg: err.Error()}
	}
	if ee.msg != "" {
		msg := ee.msg
		if ee.code == exitUsage && !strings.Contains(msg, "--help") {
			msg += " (see corral --help)"
		}
		fmt.Fprintf(stderr, "corral: %s\n", oneLine(msg))
	}
	return ee.code
}

// oneLine keeps diagnostics to a single line, as the CLI promises: wrapped
// errors sometimes carry newlines (stderr of a failed helper, lists).
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// globalOptions holds the flags every subcommand shares.
type globalOptions struct {
	logLevel string
}

func newRootCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	var g globalOptions
	root := &cobra.Command{
		Use:   "corral",
		Short: "Run and supervise whole process trees for coding agents",
		Long: `corral starts commands, streams their output, enforces timeouts and kills
whole process trees (children, grandchildren, setsid escapees) so that nothing
an agent started is left behind.

Commands run through a backend: "local" (this machine, the default), a Docker
container ("docker://NAME", or a sandbox from "docker-image://IMAGE") or an SSH
host ("ssh://user@host").`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Without this, `corral` alone prints help and exits 0; a missing
		// subcommand is a usage error like any other.
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageErrorf("missing command: try corral run -- COMMAND")
		},
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			return setupLogging(g.logLevel, stderr)
		},
	}
	// --version prints what `corral version` prints.
	var version strings.Builder
	_ = readBuildInfo().write(&version)
	root.Version = version.String()
	root.SetVersionTemplate("{{.Version}}")
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("%s: %v (see %s --help)", cmd.CommandPath(), err, cmd.CommandPath())}
	})
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "warn",
		"diagnostics on stderr: debug, info, warn, error or off")

	root.AddCommand(newRunCommand(args, stdin, stdout, stderr))
	root.AddCommand(newVersionCommand(stdout))
	if engine != nil {
		root.AddCommand(engine.Commands(stdin, stdout, stderr)...)
	} else {
		root.AddCommand(engineStandIns(args, stdout, stderr)...)
	}
	// Background processes through the daemon (serve.go, client.go).
	root.AddCommand(newServeCommand(args, stdout, stderr), newStartCommand(stdout, stderr), newPSCommand(stdout, stderr),
		newLogsCommand(stdout, stderr), newWaitCommand(stdout, stderr), newKillCommand(stdout, stderr),
		newSendCommand(stdout, stderr), newResizeCommand(stdout, stderr), newEventsCommand(stdout, stderr), newRmCommand(stdout, stderr),
		newShutdownCommand(stdout, stderr), newDashboardCommand(stdout, stderr),
		newPortsCommand(stdout, stderr), newStatsCommand(stdout, stderr), newTopCommand(stdin, stdout, stderr),
		newAttachCommand(stdin, stdout, stderr))
	return root
}

// setupLogging installs the default slog logger on stderr at level.
func setupLogging(level string, stderr io.Writer) error {
	var lv slog.Level
	switch strings.ToLower(level) {
	case "debug":
		lv = slog.LevelDebug
	case "info":
		lv = slog.LevelInfo
	case "warn", "warning":
		lv = slog.LevelWarn
	case "error":
		lv = slog.LevelError
	case "off", "none":
		slog.SetDefault(slog.New(slog.DiscardHandler))
		return nil
	default:
		return usageErrorf("--log-level %q: use debug, info, warn, error or off", level)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv})))
	return nil
}
