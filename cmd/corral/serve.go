package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/daemon"
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
corral shutdown --kill-all stops it after killing every process tree.`

func newServeCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		maxProcs       int
		grace          time.Duration
		quietIfRunning bool
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the corral daemon (the background process registry) in the foreground",
		Long:  serveLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			paths, err := daemon.DefaultPaths()
			if err != nil {
				return &exitError{code: exitCorralError, msg: err.Error()}
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			err = daemon.Run(ctx, daemon.Config{
				Paths:        paths,
				Open:         backendOptions{}.open,
				Logger:       slog.Default(),
				Version:      version,
				MaxProcesses: maxProcs,
				DefaultGrace: grace,
			})
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
	f.BoolVar(&quietIfRunning, "quiet-if-running", false, "exit 0 when another daemon already runs (used by auto-start)")
	_ = f.MarkHidden("quiet-if-running")
	return cmd
}
