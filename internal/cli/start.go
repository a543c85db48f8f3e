package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local/secrets"
	"github.com/corralhq/corral/internal/targets"
	"github.com/corralhq/corral/registry"
)

const startLong = `Start COMMAND in the background through the corral daemon and print its ID.
The daemon (started on first use) keeps it running, collects its output and
records how it ends; use ps, logs, wait, send and kill with the ID (or a unique
prefix of at least 4 hex digits).

COMMAND is given after "--" as for corral run. On the local backend it runs
in --dir, by default corral's current directory, with the environment of this
corral invocation minus variables that look like credentials (see corral run
--help; --allow-env NAME passes one on), plus --env KEY=VALUE: a command
started inside a virtualenv gets that virtualenv, and nothing of the daemon's
own environment. On a docker or ssh backend it gets the sandbox's environment
plus --env.

--watch PATTERN publishes an event (corral events -f) when an output line
contains PATTERN; --notify marks the exit event as one you want to hear of: it is
never held back by the event rate limit and carries the exit status and the last
lines of the output (unless you already got the result with wait or logs).

Dev servers: --name web names the process; the name works wherever an ID
does (logs web, kill web). Starting a name whose process still runs with the
same command, directory and environment prints its ID instead of starting a
second one (and says "reused" on stderr); with another command it is refused,
unless --replace kills the old tree first. --ready-port, --ready-pattern and
--ready-url say when the process is ready (all given must hold); corral wait
--ready ID blocks until then, and a process that ends after it was ready
publishes a crashed event. --ttl kills the tree when the time is up (a
ttl_expired event; ps shows the time LEFT); --idle-timeout kills it after
that long without output (LEFT counts down whichever comes first).`

func newStartCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		req      daemon.StartRequest
		dev      devFlags
		labels   []string
		asJSON   bool
		backend  string
		allowEnv []string
		lim      limitFlags
		rw       runawayFlags
	)
	cmd := &cobra.Command{
		Use:   "start [flags] -- COMMAND...",
		Short: "Start a command in the background and print its ID",
		Long:  startLong + "\n\n" + limitsHelp + "\n\n" + runawayHelp,
		Example: "  corral start --label task=build -- make -j8\n  corral start --watch ERROR --notify -- ./server\n  corral start --stdin -- python3 -i\n" +
			"  corral start --name web --ready-port 3000 --ttl 2h -- npm run dev && corral wait --ready --timeout 60s web\n" +
			"  corral start --memory 2G --pids 512 -- ./server",
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
			if err := dev.check(cmd); err != nil {
				return err
			}
			l, err := parseLabelFlags("start", labels)
			if err != nil {
				return err
			}
			for _, name := range allowEnv {
				if !env.ValidEnvName(name) {
					return usageErrorf("start: --allow-env %q: give a variable name matching [A-Za-z_][A-Za-z0-9_]*", name)
				}
			}
			if req.Limits, err = lim.parse("start", cmd); err != nil {
				return err
			}
			if req.Runaway, err = rw.parse("start", cmd); err != nil {
				return err
			}
			req.Labels, req.Backend, req.Command = l, backend, commandLine(args)
			if backend == "local" {
				// Through the daemon, the daemon's would apply: the
				// caller's environment and directory travel explicitly.
				req.Environ = secrets.CommandEnviron(os.Environ(), allowEnv)
				dir := req.Dir
				if dir == "" {
					dir = "."
				}
				// Relative to this shell, not to the daemon's directory.
				abs, err := filepath.Abs(dir)
				if err != nil {
					return usageErrorf("start: --dir %q: %v", req.Dir, err)
				}
				req.Dir = abs
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
			opts := req.Options()
			dev.apply(&opts)
			in, err := startKeyed(cmd.Context(), c, opts, stderr)
			if err != nil {
				if in.ID != "" && asJSON {
					printJSON(stdout, in)
				}
				return daemonError("start", err)
			}
			if in.Reused {
				// On stderr: stdout stays the ID alone, for id=$(corral start …).
				fmt.Fprintf(stderr, "corral: reused %s: already running with the same command\n", procName(in))
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
	f.StringVar(&backend, "backend", targets.Default, "where to run: "+targets.Help)
	f.StringArrayVar(&labels, "label", nil, "attach a label KEY=VALUE (repeatable), for ps and kill --all")
	f.StringArrayVar(&req.Watch, "watch", nil, "publish an event when an output line contains this text (repeatable)")
	f.StringArrayVar(&req.WatchRegex, "watch-regex", nil, "like --watch with a Go regular expression (repeatable)")
	f.BoolVar(&req.Notify, "notify", false, "announce the exit as an event that is never rate-limited, with status and output tail")
	f.BoolVar(&req.PTY, "pty", false, "run on a pseudo-terminal (not re-attached after a daemon restart)")
	f.BoolVar(&req.Stdin, "stdin", false, "keep stdin open for corral send")
	f.StringArrayVar(&req.Env, "env", nil, "set a variable KEY=VALUE (repeatable)")
	f.StringArrayVar(&allowEnv, "allow-env", nil, "pass this secret-looking variable of corral's environment on (repeatable; local backend)")
	f.StringVar(&req.Dir, "dir", "", "working directory (default: the current one, for the local backend)")
	f.BoolVar(&asJSON, "json", false, "print the process as JSON")
	dev.addFlags(cmd)
	lim.addFlags(cmd)
	rw.addFlags(cmd, "")
	return cmd
}

// devFlags are start's flags for dev servers: a name, readiness and
// lifetimes.
type devFlags struct {
	name         string
	replace      bool
	readyPort    int
	readyPattern string
	readyURL     string
	ttl          time.Duration
	idleTimeout  time.Duration
}

func (d *devFlags) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&d.name, "name", "", "name the process (unique among running ones); starting a running name with the same command reuses it")
	f.BoolVar(&d.replace, "replace", false, "with --name: kill the tree holding the name first, then start this one")
	f.IntVar(&d.readyPort, "ready-port", 0, "ready once a process of the tree listens on this TCP port")
	f.StringVar(&d.readyPattern, "ready-pattern", "", "ready once an output line matches this Go regular expression")
	f.StringVar(&d.readyURL, "ready-url", "", "ready once a GET of this http(s) URL, made inside the sandbox, answers 2xx or 3xx")
	f.DurationVar(&d.ttl, "ttl", 0, "kill the tree this long after it started, e.g. 2h (0: never)")
	f.DurationVar(&d.idleTimeout, "idle-timeout", 0, "kill the tree after this long without output (0: never)")
}

// check refuses bad values before anything starts, so that a typo is a
// usage error (exit 2) rather than a failed start.
func (d *devFlags) check(cmd *cobra.Command) error {
	if d.replace && d.name == "" {
		return usageErrorf("start: --replace needs --name: it replaces the process holding that name")
	}
	if cmd.Flags().Changed("name") {
		if err := registry.ValidateName(d.name); err != nil {
			return usageErrorf("start: --name: %s", strings.TrimPrefix(err.Error(), registry.ErrInvalidOptions.Error()+": "))
		}
	}
	if cmd.Flags().Changed("ready-port") {
		if err := checkPort("start", "--ready-port", d.readyPort); err != nil {
			return err
		}
	}
	if cmd.Flags().Changed("ready-pattern") {
		if d.readyPattern == "" {
			return usageErrorf("start: --ready-pattern is empty: give a Go regular expression such as 'listening on'")
		}
		if _, err := regexp.Compile(d.readyPattern); err != nil {
			return usageErrorf("start: --ready-pattern %q: %v", d.readyPattern, err)
		}
	}
	if cmd.Flags().Changed("ready-url") {
		if err := env.ValidateCheckURL(d.readyURL); err != nil {
			return usageErrorf("start: --ready-url %q: %s", d.readyURL, specReason(err))
		}
	}
	if d.ttl < 0 {
		return usageErrorf("start: --ttl %s: must not be negative", d.ttl)
	}
	if d.idleTimeout < 0 {
		return usageErrorf("start: --idle-timeout %s: must not be negative", d.idleTimeout)
	}
	return nil
}

// apply sets the checked flags on opts.
func (d *devFlags) apply(opts *registry.StartOptions) {
	opts.Name, opts.Replace, opts.TTL, opts.IdleTimeout = d.name, d.replace, d.ttl, d.idleTimeout
	if d.readyPort != 0 || d.readyPattern != "" || d.readyURL != "" {
		opts.Ready = &registry.ReadyOptions{Port: d.readyPort, Pattern: d.readyPattern, URL: d.readyURL}
	}
}

// specReason is what a validation error says about the value, without the
// "invalid spec: Field "value":" prefix the flag's name replaces.
func specReason(err error) string {
	var se *env.SpecError
	if errors.As(err, &se) {
		return se.Reason
	}
	return err.Error()
}

// procName is a process as messages name it: "proc_… (web)", or the ID
// alone when it has no name.
func procName(in registry.Info) string {
	if in.Name != "" {
		return fmt.Sprintf("%s (%s)", in.ID, in.Name)
	}
	return in.ID
}

func validEnvPair(kv string) bool {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return env.ValidEnvName(kv[:i])
		}
	}
	return false
}
