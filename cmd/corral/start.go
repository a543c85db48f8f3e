package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/env"
)

const startLong = `Start COMMAND in the background through the corral daemon and print its ID.
The daemon (started on first use) keeps it running, collects its output and
records how it ends; use ps, logs, wait, send and kill with the ID (or a unique
prefix of at least 4 hex digits).

COMMAND is given after "--" as for corral run. It runs in --dir, by default
corral's current directory for the local backend. It gets the daemon's
environment (minus secret-looking variables) plus --env KEY=VALUE: the
environment of this corral invocation is not passed on.

--watch PATTERN publishes an event (corral events -f) when an output line
contains PATTERN; --notify marks the exit event as one you want to hear of: it is
never held back by the event rate limit and carries the exit status and the last
lines of the output (unless you already got the result with wait or logs).`

func newStartCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		req     daemon.StartRequest
		labels  []string
		asJSON  bool
		backend string
	)
	cmd := &cobra.Command{
		Use:     "start [flags] -- COMMAND...",
		Short:   "Start a command in the background and print its ID",
		Long:    startLong,
		Example: "  corral start --label task=build -- make -j8\n  corral start --watch ERROR --notify -- ./server\n  corral start --stdin -- python3 -i",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("start: missing command: give it after --, e.g. corral start -- make test")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkBackend(backend); err != nil {
				return usageErrorf("start: %v", err)
			}
			for _, kv := range req.Env {
				if !validEnvPair(kv) {
					return usageErrorf("start: --env %q: must be KEY=VALUE with KEY matching [A-Za-z_][A-Za-z0-9_]*", kv)
				}
			}
			l, err := parseLabelFlags("start", labels)
			if err != nil {
				return err
			}
			req.Labels, req.Backend, req.Command = l, backend, commandLine(args)
			if req.Dir == "" && backend == "local" {
				if wd, err := os.Getwd(); err == nil {
					req.Dir = wd
				}
			}
			if req.PTY {
				size := env.DefaultWindowSize
				if s, ok := terminalSize(stdout); ok {
					size = s
				}
				req.PTYSize = &size
			}
			c, _, err := connect(cmd.Context(), stderr)
			if err != nil {
				return err
			}
			in, err := c.Start(cmd.Context(), req.Options())
			if err != nil {
				if in.ID != "" && asJSON {
					printJSON(stdout, in)
				}
				return daemonError("start", err)
			}
			if asJSON {
				return printJSON(stdout, in)
			}
			fmt.Fprintln(stdout, in.ID)
			return nil
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false)
	f.StringVar(&backend, "backend", defaultBackend, "where to run: "+backendHelp)
	f.StringArrayVar(&labels, "label", nil, "attach a label KEY=VALUE (repeatable), for ps and kill --all")
	f.StringArrayVar(&req.Watch, "watch", nil, "publish an event when an output line contains this text (repeatable)")
	f.StringArrayVar(&req.WatchRegex, "watch-regex", nil, "like --watch with a Go regular expression (repeatable)")
	f.BoolVar(&req.Notify, "notify", false, "announce the exit as an event that is never rate-limited, with status and output tail")
	f.BoolVar(&req.PTY, "pty", false, "run on a pseudo-terminal (not re-attached after a daemon restart)")
	f.BoolVar(&req.Stdin, "stdin", false, "keep stdin open for corral send")
	f.StringArrayVar(&req.Env, "env", nil, "set a variable KEY=VALUE (repeatable)")
	f.StringVar(&req.Dir, "dir", "", "working directory (default: the current one, for the local backend)")
	f.BoolVar(&asJSON, "json", false, "print the process as JSON")
	return cmd
}

func validEnvPair(kv string) bool {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return env.ValidEnvName(kv[:i])
		}
	}
	return false
}
