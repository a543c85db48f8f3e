package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local/secrets"
	"github.com/corralhq/corral/internal/errclass"
	"github.com/corralhq/corral/internal/targets"
	"github.com/corralhq/corral/registry"
)

// runOptions are the flags of `corral run`.
type runOptions struct {
	backend     string
	timeout     time.Duration
	idleTimeout time.Duration
	grace       time.Duration
	pty         bool
	stdin       bool
	env         []string
	allowEnv    []string
	dir         string
	noDaemon    bool
	// limits are --memory, --cpus and --pids; nil when none is given.
	limits *env.Limits
	// runaway are the --runaway-* thresholds; nil when none is given.
	runaway *registry.RunawayOptions
}

const runLong = `Run COMMAND in the foreground through a backend, stream its output live to
stdout, and exit with its exit code.

COMMAND goes after "--". A single word is a complete shell command line, run
with /bin/sh -c, so pipes and ";" work:

    corral run -- 'make test 2>&1 | tail -n 50'

Several words are joined into a command line with each word single-quoted, so
they run exactly as if typed: corral run -- sh -c 'echo hi; exit 3'.

Output (stdout and stderr of the command, merged) is streamed to corral's
stdout as it arrives, with or without --pty. The command reads no stdin
unless --stdin is given; then corral's stdin is copied to it and closed at EOF.
With --pty --stdin and a terminal on stdin, the terminal is switched to raw
mode while the command runs, so keys (Ctrl-C included) reach the command's
terminal as typed: an interactive session. With --pty but no --stdin the
command's stdin is its terminal, on which nothing is typed: a command that
reads stdin waits instead of reading EOF.

When --timeout (wall clock) or --idle-timeout (no output for that long)
fires, corral kills the whole process tree: SIGTERM, --grace to exit, then
SIGKILL, and it checks that nothing of the tree is left. Children that moved
to their own session (setsid, double fork) are part of the tree. corral then
prints one line on stderr naming the timeout and exits 124.

SIGINT (Ctrl-C), SIGTERM or SIGHUP sent to corral kills the tree the same
way and exits 130, 143 or 129.

Secrets: the command inherits corral's environment minus variables that look
like credentials (*_TOKEN, *_API_KEY, *_SECRET, *_PASSWORD, AWS_*, OPENAI_*,
ANTHROPIC_*, SSH_AUTH_SOCK, DATABASE_URL and similar). Pass one on with
--allow-env NAME, or set a value explicitly with --env NAME=VALUE.

When the kernel's OOM killer ended the command, corral says so in one line on
stderr ("... ran out of memory ...") and exits 137, as for any SIGKILL.

Exit status: the command's exit code; 128+N when signal N ended it; 124 after
a timeout; 130, 143 or 129 when corral got SIGINT, SIGTERM or SIGHUP; 141
when corral's stdout was closed (the tree is killed, as by SIGPIPE); 125 when
corral could not run the command (backend or start failure); 2 for a usage
error.`

const runExample = `  corral run -- sh -c 'echo hi; exit 3'      # prints hi, exits 3
  corral run --timeout 10m -- 'go test ./...'
  corral run --idle-timeout 2m --grace 10s -- npm run build
  corral run --env CI=1 --dir ./web -- make
  corral run --allow-env GITHUB_TOKEN -- gh pr list
  corral run --memory 2G --cpus 1.5 --pids 512 -- make -j8
  corral run --pty -- ls --color=auto
  echo data | corral run --stdin -- wc -c`

func newRunCommand(mainArgs []string, stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	var (
		o   runOptions
		lim limitFlags
		rw  runawayFlags
	)
	cmd := &cobra.Command{
		Use:     "run [flags] -- COMMAND...",
		Short:   "Run a command in the foreground; kill its whole tree on timeout or interrupt",
		Long:    runLong + "\n\n" + limitsHelp + "\n\n" + runawayHelp,
		Example: runExample,
		// Everything after the first word of COMMAND belongs to COMMAND, so
		// `corral run ls -la` passes -la to ls even without "--".
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("run: missing command: give it after --, e.g. corral run -- make test")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if engine == nil && o.private() {
				// A registry of its own needs the backends: corrald's.
				return handOver("run", mainArgs, stdout, stderr)
			}
			if err := o.validate(); err != nil {
				return err
			}
			var err error
			if o.limits, err = lim.parse("run", cmd); err != nil {
				return err
			}
			if o.runaway, err = rw.parse("run", cmd); err != nil {
				return err
			}
			return runForeground(cmd.Context(), o, commandLine(args), stdin, stdout, stderr)
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false)
	f.StringVar(&o.backend, "backend", targets.Default, "where to run: "+targets.Help)
	f.DurationVar(&o.timeout, "timeout", 0, "kill the tree after this long (e.g. 90s, 10m; 0 = no limit)")
	f.DurationVar(&o.idleTimeout, "idle-timeout", 0, "kill the tree after this long without output (0 = no limit)")
	f.DurationVar(&o.grace, "grace", 5*time.Second, "time between SIGTERM and SIGKILL when killing")
	f.BoolVar(&o.pty, "pty", false, "run on a pseudo-terminal (sized like corral's terminal, else 24x80)")
	f.BoolVar(&o.stdin, "stdin", false, "copy corral's stdin to the command, closing it at EOF")
	f.StringArrayVar(&o.env, "env", nil, "set a variable KEY=VALUE for the command (repeatable)")
	f.StringArrayVar(&o.allowEnv, "allow-env", nil,
		"pass this secret-looking variable of corral's environment on (repeatable; see Secrets above)")
	f.StringVar(&o.dir, "dir", "", "working directory (default: corral's)")
	f.BoolVar(&o.noDaemon, "no-daemon", false, "run in a registry of this command's own instead of the daemon's ("+noDaemonEnv+"=1 does the same)")
	lim.addFlags(cmd)
	rw.addFlags(cmd, "")
	return cmd
}

func (o runOptions) validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--timeout", o.timeout}, {"--idle-timeout", o.idleTimeout}, {"--grace", o.grace}} {
		if d.v < 0 {
			return usageErrorf("run: %s %s: must not be negative", d.name, d.v)
		}
	}
	for _, kv := range o.env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok {
			return usageErrorf("run: --env %q: must be KEY=VALUE", kv)
		}
		if !env.ValidEnvName(name) {
			return usageErrorf("run: --env %q: variable name must match [A-Za-z_][A-Za-z0-9_]*", kv)
		}
	}
	for _, name := range o.allowEnv {
		if !env.ValidEnvName(name) {
			return usageErrorf("run: --allow-env %q: give a variable name matching [A-Za-z_][A-Za-z0-9_]*", name)
		}
	}
	if err := checkBackend(o.backend); err != nil {
		return &exitError{code: exitUsage, msg: "run: " + err.Error()}
	}
	return nil
}

// interruptSignals are the signals to corral that kill the tree; the exit
// code is 128 + the signal's number, as a shell would report. SIGHUP is
// among them because the command runs in a session of its own: when
// corral's terminal goes away, only corral hears about it, and dying of it
// would leave the tree running.
var interruptSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

func runForeground(parent context.Context, o runOptions, command string, stdin io.Reader, stdout, stderr io.Writer) error {
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithCancel(parent)
	defer cancel()

	// A signal cancels the Run context, which makes the registry kill the
	// tree (TERM, grace, KILL, verify) before Run returns; corral's own exit
	// waits for that, so Ctrl-C never leaves the tree behind.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, interruptSignals...)
	defer signal.Stop(sigs)
	// With SIGPIPE notified, a write to a closed stdout fails with EPIPE
	// instead of killing corral on the spot, which would leave the tree
	// running; brokenStdout then ends the tree as SIGPIPE would have ended
	// a command writing there directly. (Notify, unlike Ignore, is not
	// inherited by the commands corral starts.)
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	defer signal.Stop(pipes)
	var stdoutBroken atomic.Bool
	streamOut := &brokenPipeWriter{w: stdout, onBroken: func() {
		if stdoutBroken.CompareAndSwap(false, true) {
			slog.Info("stdout closed; killing the process tree")
			cancel()
		}
	}}

	var caught os.Signal
	caughtc := make(chan os.Signal, 1)
	watcherDone := make(chan struct{})
	// The watcher never outlives the command, whichever way it returns.
	defer func() { cancel(); <-watcherDone }()
	go func() {
		defer close(watcherDone)
		select {
		case s := <-sigs:
			caughtc <- s
			slog.Info("signal received; killing the process tree", "signal", s, "grace", o.grace)
			cancel()
		case <-ctx.Done():
		}
	}()

	svc, closeSvc, err := runService(ctx, o, stderr)
	if err != nil {
		return err
	}
	defer closeSvc()

	start, err := o.startOptions(command)
	if err != nil {
		return &exitError{code: exitCorralError, msg: fmt.Sprintf("run: %v", err)}
	}
	if o.pty {
		size := env.DefaultWindowSize
		if s, ok := terminalSize(stdout); ok {
			size = s
		}
		start.PTY = &size
		if o.stdin {
			// Interactive: keys go to the command's terminal as typed.
			if restore, ok := makeRaw(stdin); ok {
				defer restore()
			}
		}
	}
	// What runs beside the command (stdin, terminal size) stops with Run;
	// the stdin copier may stay blocked in a read, which the exit ends.
	sideCtx, stopSide := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSide()
	// Someone can answer a prompt only by typing on corral's stdin, when
	// it is a terminal and --stdin copies it; otherwise a command that
	// asks waits for ever, and one line says so (once per wait).
	var onInput func(registry.WaitingInput)
	var runID atomic.Value // the process's ID, once it runs
	if !o.stdin || !isTerminal(stdin) {
		onInput = func(w registry.WaitingInput) {
			id, _ := runID.Load().(string)
			fmt.Fprintln(stderr, waitingInputLine(id, w, o.stdin))
		}
	}
	runOpts := registry.RunOptions{
		StartOptions:   start,
		Timeout:        o.timeout,
		IdleTimeout:    o.idleTimeout,
		Grace:          o.grace,
		Output:         streamOut,
		OnWaitingInput: onInput,
		Started: func(in registry.Info) {
			runID.Store(in.ID)
			if o.stdin {
				go copyStdin(sideCtx, svc, in.ID, stdin)
			}
			if o.pty {
				go followTerminalSize(sideCtx, svc, in.ID, stdout)
			}
		},
	}
	res, runErr := svc.Run(ctx, runOpts)
	if _, lazy := svc.(*daemon.Client); lazy && errors.Is(runErr, daemon.ErrNoDaemon) {
		// The run is the first call to the daemon, with no status call
		// before it: where none answered, nothing was sent, so start
		// one and run.
		c, _, err := connect(ctx, stderr)
		if err != nil {
			return err
		}
		defer c.CloseIdle()
		svc = c
		res, runErr = svc.Run(ctx, runOpts)
	}
	stopSide()

	cancel()
	<-watcherDone // after this, caughtc holds the signal if one arrived
	select {
	case caught = <-caughtc:
	default:
	}
	if caught != nil {
		n := signalNumber(caught)
		name := "signal " + strconv.Itoa(n)
		if sig := env.SignalFromNumber(n); sig != "" {
			name = sig.String()
		}
		return &exitError{code: 128 + n, msg: fmt.Sprintf("interrupted by %s; killed the process tree", name)}
	}
	if stdoutBroken.Load() {
		// As for a command killed by SIGPIPE in a shell pipeline: no
		// message, status 128+SIGPIPE.
		return &exitError{code: 128 + int(syscall.SIGPIPE)}
	}
	if runErr != nil {
		// "registry: " says nothing to a user of the command; "daemon: "
		// does (the daemon died under the run, say), so it stays.
		code := exitCorralError
		if errclass.Of(runErr) == errclass.Invalid && !errors.Is(runErr, env.ErrInvalidSpec) {
			// A bad request (a target the daemon's check refused): a
			// usage error, as where the same check runs in process. A
			// spec the backend refused (a missing --dir) is a failed
			// start (invalid_spec).
			code = exitUsage
		}
		return &exitError{code: code, msg: "run: " + strings.ReplaceAll(runErr.Error(), "registry: ", "")}
	}
	if res.TimedOut != "" {
		return &exitError{code: exitTimeout, msg: timeoutMessage(res, o)}
	}
	if res.Info.Status == nil {
		return &exitError{code: exitCorralError, msg: fmt.Sprintf("run: process %s ended in state %s without an exit status", res.Info.ID, res.Info.State)}
	}
	return exitForInfo(res.Info)
}

// brokenPipeWriter calls onBroken when a write fails because the reader
// went away (EPIPE).
type brokenPipeWriter struct {
	w        io.Writer
	onBroken func()
}

func (b *brokenPipeWriter) Write(p []byte) (int, error) {
	n, err := b.w.Write(p)
	if err != nil && errors.Is(err, syscall.EPIPE) {
		b.onBroken()
	}
	return n, err
}

// exitFor maps the command's status to corral's exit: the code itself, or
// 128+N for signal N, as a shell reports it.
func exitFor(st env.ExitStatus) error {
	code := st.ShellCode()
	if code == 0 {
		return nil
	}
	return &exitError{code: code}
}

// exitForInfo is exitFor for a process that ended, which also says so
// when the kernel's OOM killer ended it: its status alone (137, SIGKILL)
// looks like any kill.
func exitForInfo(in registry.Info) error {
	err := exitFor(*in.Status)
	if ee, ok := err.(*exitError); ok && registry.IsOutOfMemory(in.Reason) {
		ee.msg = oomMessage(in)
	}
	return err
}

// oomMessage is what run and wait say of a process the OOM killer ended.
func oomMessage(in registry.Info) string {
	st := *in.Status
	st.OOMKilled = false // said in words already
	return fmt.Sprintf("%s ran %s: the kernel's OOM killer ended it (%s); raise its memory limit or make it use less", in.ID, in.Reason, st)
}

func timeoutMessage(res registry.RunResult, o runOptions) string {
	var what string
	switch res.TimedOut {
	case registry.TimedOutIdle:
		what = fmt.Sprintf("idle timeout: no output for %s", o.idleTimeout)
	case registry.TimedOutTimeout:
		what = fmt.Sprintf("timeout: still running after %s", o.timeout)
	default:
		what = res.TimedOut + " fired"
	}
	return what + "; " + killedTreeWords(res.Kill)
}

// killedTreeWords says how a timeout or interrupt ended the tree.
func killedTreeWords(k *registry.KillResult) string {
	if k == nil {
		return "killed the process tree"
	}
	how := string(k.Signal)
	if k.Escalated {
		how += ", then SIGKILL after the grace period"
	}
	msg := fmt.Sprintf("killed the process tree (%s; %d %s ended)", how, k.Ended, plural(k.Ended, "process", "processes"))
	if len(k.Survivors) > 0 {
		msg += fmt.Sprintf("; survivors %v", k.Survivors)
	}
	return msg
}

func signalNumber(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return int(syscall.SIGINT)
}

// noDaemonEnv, set to 1, makes `corral run` use a private registry, as
// --no-daemon does.
const noDaemonEnv = "CORRAL_NO_DAEMON"

// runService returns the registry `corral run` goes through: the daemon's
// (started if none runs), so the process is listed in `corral ps` and a
// remote backend's connection is already warm; or, with --no-daemon or
// CORRAL_NO_DAEMON=1, a registry of its own that lives as long as this
// command, for scripts that must not leave a daemon behind.
func runService(ctx context.Context, o runOptions, stderr io.Writer) (registry.Service, func(), error) {
	if o.private() {
		reg, err := registry.New(registry.Config{
			Open:           engine.PrivateOpen(o.allowEnv),
			DefaultBackend: targets.Default,
			DefaultGrace:   o.grace,
			Logger:         slog.Default(),
		})
		if err != nil {
			return nil, nil, &exitError{code: exitCorralError, msg: fmt.Sprintf("run: %v", err)}
		}
		return reg, func() {
			if err := reg.Close(); err != nil {
				slog.Warn("closing the registry", "err", err)
			}
			engine.WaitSandboxRemovals()
		}, nil
	}
	// No status call first: a short run is one round trip to the daemon.
	// The run itself finds out when none answers (runForeground).
	c, _, err := dial()
	if err != nil {
		return nil, nil, err
	}
	return c, c.CloseIdle, nil
}

// private: the run has a registry of its own (--no-daemon,
// CORRAL_NO_DAEMON=1).
func (o runOptions) private() bool { return o.noDaemon || os.Getenv(noDaemonEnv) == "1" }

// startOptions is the command as the registry starts it. On the local
// backend it gets this process's environment (credentials filtered, as
// the local backend does, unless --allow-env names them) and working
// directory explicitly: through the daemon, the daemon's would apply.
func (o runOptions) startOptions(command string) (registry.StartOptions, error) {
	start := registry.StartOptions{Backend: o.backend, Command: command, Dir: o.dir, Env: o.env, Stdin: o.stdin, Limits: o.limits, Runaway: o.runaway}
	if o.backend != "local" {
		return start, nil
	}
	start.Environ = secrets.CommandEnviron(os.Environ(), o.allowEnv)
	dir := o.dir
	if dir == "" {
		dir = "."
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return start, fmt.Errorf("--dir %q: %w", o.dir, err)
	}
	start.Dir = abs
	return start, nil
}

// followTerminalSize resizes the command's terminal whenever the user's
// changes, until ctx is done.
func followTerminalSize(ctx context.Context, svc registry.Service, id string, term io.Writer) {
	winch := make(chan os.Signal, 1)
	notifyResize(winch)
	defer signal.Stop(winch)
	for {
		select {
		case <-ctx.Done():
			return
		case <-winch:
			size, ok := terminalSize(term)
			if !ok {
				continue
			}
			if err := svc.Resize(ctx, id, size); err != nil {
				slog.Debug("resize: the command's terminal did not follow", "id", id, "err", err)
			}
		}
	}
}

// waitingInputLine is what corral run says of a command that waits for
// input nobody can give from here.
func waitingInputLine(id string, w registry.WaitingInput, stdin bool) string {
	line := "corral: run: " + id + " waits for input (" + w.Kind + ")"
	if w.Prompt != "" {
		line += " at " + strconv.Quote(w.Prompt)
	}
	if !stdin {
		return line + " but was started without --stdin, so nothing can answer it: interrupt it, or run it again with --stdin"
	}
	return line + " and nothing here can answer it: answer with corral send " + id + " TEXT, or interrupt it"
}
