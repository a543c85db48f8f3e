package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/env"
)

const serveLong = `Run the corral daemon in the foreground: it owns the registry of background
processes and serves the API (HTTP/JSON, docs/api.md) on a unix socket that
only your user can reach: $XDG_RUNTIME_DIR/corral/corral.sock, else
~/.local/state/corral/corral.sock (CORRAL_SOCKET overrides it).

The other commands (start, ps, logs, ...) start a daemon in the background
when none runs; run corral serve yourself under a service manager instead.

Every state change is checkpointed to ~/.local/state/corral/state.json
($XDG_STATE_HOME/corral). SIGTERM or SIGINT stops the daemon gracefully:
background processes keep running and the next daemon re-attaches them,
with their output and their real exit status if they ended meanwhile.
corral shutdown --kill-all stops it after killing every process tree.

With CORRAL_OWNER_PID set to a process ID (a test harness's, an agent
runtime's), the daemon lives for that process: once it has ended, even by
SIGKILL, the daemon kills every process tree and stops. A daemon started
in the background inherits the variable from the command that started it.`

func newServeCommand(mainArgs []string, stdout, stderr io.Writer) *cobra.Command {
	var (
		maxProcs       int
		grace          time.Duration
		quietIfRunning bool
		idleClose      time.Duration
		httpAddr       string
		logMax         string
		ceiling        limitFlags
		rw             runawayFlags
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the corral daemon (the background process registry) in the foreground",
		Long:  serveLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := daemonUnavailable(); err != nil {
				return err
			}
			if engine == nil {
				return handOver("serve", mainArgs, stdout, stderr)
			}
			if !cmd.Flags().Changed("idle-close") {
				if _, err := idleCloseEnv(); err != nil {
					return &exitError{code: exitUsage, msg: "serve: " + err.Error()}
				}
			}
			if !cmd.Flags().Changed("log-max") {
				if _, err := env.LogMaxFromEnv(); err != nil {
					return &exitError{code: exitUsage, msg: "serve: " + err.Error()}
				}
			}
			runaway, err := rw.parse("serve", cmd)
			if err != nil {
				return err
			}
			maxLog, err := env.ParseLogMax(logMax)
			if err != nil {
				return &exitError{code: exitUsage, msg: "serve: --log-max: " + err.Error()}
			}
			ceil, err := ceiling.parse("serve", cmd)
			if err != nil {
				return err
			}
			paths, err := daemon.DefaultPaths()
			if err != nil {
				return &exitError{code: exitCorralError, msg: err.Error()}
			}
			open, err := engine.DaemonOpen(paths.StateDir, idleClose, maxLog, ceil)
			if err != nil {
				return &exitError{code: exitCorralError, msg: "serve: " + err.Error()}
			}
			owner, err := ownerFromEnv()
			if err != nil {
				return &exitError{code: exitUsage, msg: "serve: " + err.Error()}
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			err = daemon.Run(ctx, daemon.Config{
				Paths:        paths,
				Open:         open,
				HTTPAddr:     httpAddr,
				Logger:       slog.Default(),
				Version:      version,
				MaxProcesses: maxProcs,
				DefaultGrace: grace,
				Runaway:      runaway,
				Owner:        owner,
			})
			engine.WaitSandboxRemovals()
			if errors.Is(err, daemon.ErrAlreadyRunning) && quietIfRunning {
				return nil
			}
			if err != nil {
				return &exitError{code: exitCorralError, msg: fmt.Sprintf("serve: %v", err)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&maxProcs, "max-processes", daemon.DefaultMaxProcesses, "most processes tracked at once (finished ones are pruned first)")
	f.DurationVar(&grace, "grace", 5*time.Second, "default time between SIGTERM and SIGKILL for kills")
	f.DurationVar(&idleClose, "idle-close", defaultIdleClose(), "close a backend's connection (SSH) after this long without use; the next use dials again (0: keep open; default from $CORRAL_IDLE_CLOSE, else 10m)")
	f.StringVar(&logMax, "log-max", defaultLogMax(), "the most of each process's output kept on disk, as a head (a quarter) and a tail: 32MiB, 1GiB, none (default from $CORRAL_LOG_MAX, else 32MiB); the daemon's own buffer keeps less")
	f.StringVar(&httpAddr, "http", "", "serve the web dashboard on this loopback address from the start (127.0.0.1:PORT); its URL, with the access token, is logged (see corral dashboard)")
	ceiling.addCeilingFlags(cmd)
	rw.addFlags(cmd, "by default, ")
	f.BoolVar(&quietIfRunning, "quiet-if-running", false, "exit 0 when another daemon already runs (used by auto-start)")
	_ = f.MarkHidden("quiet-if-running")
	return cmd
}

// defaultLogMax is --log-max's default: $CORRAL_LOG_MAX, which also
// reaches a daemon auto-started by another command, else 0 (the backends'
// default, env.DefaultLogMax).
func defaultLogMax() string {
	if v := os.Getenv("CORRAL_LOG_MAX"); v != "" {
		return v
	}
	return "0"
}

// defaultIdleClose is --idle-close's default: $CORRAL_IDLE_CLOSE, which
// also reaches a daemon auto-started by another command, else 10 minutes
// (also for a bad value, which serve then refuses with exit status 2).
func defaultIdleClose() time.Duration {
	if d, err := idleCloseEnv(); err == nil && d >= 0 {
		return d
	}
	return 10 * time.Minute
}

func idleCloseEnv() (time.Duration, error) {
	v := os.Getenv("CORRAL_IDLE_CLOSE")
	if v == "" {
		return -1, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("CORRAL_IDLE_CLOSE=%q: want a duration such as 10m, 1h or 0 (never close)", v)
	}
	return d, nil
}

// ownerFromEnv reads the owner's PID from daemon.OwnerEnv: 0 when unset.
func ownerFromEnv() (int, error) {
	v := os.Getenv(daemon.OwnerEnv)
	if v == "" {
		return 0, nil
	}
	pid, err := strconv.Atoi(v)
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s=%.20q is not a process ID; unset it, or set it to the PID of the process the daemon lives for", daemon.OwnerEnv, v)
	}
	return pid, nil
}
