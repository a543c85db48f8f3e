package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/internal/errclass"
	"github.com/corralhq/corral/registry"
)

// The commands that act on background processes (start, ps, logs, wait,
// kill, send, events, rm) talk to the daemon, `corral serve`, over its unix
// socket. When none runs, the first such command starts one in the
// background (detached in its own session, its log in the state directory)
// and says so on stderr. CORRAL_NO_AUTOSTART=1 turns that off.

// daemonStartWait bounds the wait for an auto-started daemon's socket.
const daemonStartWait = 15 * time.Second

// daemonSlowNotice is how long a wait for an auto-started daemon goes
// unexplained before the client says on stderr what it waits for.
const daemonSlowNotice = time.Second

// dial returns a client of the daemon's socket, without a call: the first
// request finds out whether a daemon answers (daemon.ErrNoDaemon).
func dial() (*daemon.Client, daemon.Paths, error) {
	if err := daemonUnavailable(); err != nil {
		return nil, daemon.Paths{}, err
	}
	paths, err := daemon.DefaultPaths()
	if err != nil {
		return nil, paths, &exitError{code: exitCorralError, msg: err.Error()}
	}
	return daemon.NewClient(paths.Socket), paths, nil
}

// connect returns a client of the running daemon, starting one if needed.
func connect(ctx context.Context, stderr io.Writer) (*daemon.Client, daemon.Status, error) {
	c, paths, err := dial()
	if err != nil {
		return nil, daemon.Status{}, err
	}
	st, err := c.Status(ctx)
	if err == nil {
		return c, st, nil
	}
	// A daemon that went away under the request is no daemon either.
	if !errors.Is(err, daemon.ErrNoDaemon) && !errors.Is(err, daemon.ErrDaemonLost) {
		return nil, st, daemonError("connect", err)
	}
	if os.Getenv("CORRAL_NO_AUTOSTART") == "1" {
		return nil, st, &exitError{code: exitCorralError, msg: fmt.Sprintf("no corral daemon runs on %s (CORRAL_NO_AUTOSTART=1): start one with corral serve", paths.Socket)}
	}
	pid, err := spawnDaemon(paths)
	if err != nil {
		return nil, st, &exitError{code: exitCorralError, msg: fmt.Sprintf("start the corral daemon: %v", err)}
	}
	began := time.Now()
	deadline := began.Add(daemonStartWait)
	told := false
	for interval := 5 * time.Millisecond; ; interval = min(2*interval, 100*time.Millisecond) {
		st, err = c.Status(ctx)
		if err == nil {
			if st.PID == pid {
				fmt.Fprintf(stderr, "corral: started the corral daemon (pid %d, socket %s, log %s)\n", pid, paths.Socket, paths.LogFile())
				if n := st.Recovered.Recovering; n > 0 {
					fmt.Fprintf(stderr, "corral: the daemon is re-attaching %d processes of its state file in the background; ps lists them as recovering until then\n", n)
				}
			}
			return c, st, nil
		}
		if !told && time.Since(began) > daemonSlowNotice {
			// Never silent: say what the wait is for, and where to look.
			told = true
			fmt.Fprintf(stderr, "corral: waiting for the corral daemon (pid %d) to answer on %s, at most %s; its log: %s\n",
				pid, paths.Socket, daemonStartWait, paths.LogFile())
		}
		if !errors.Is(err, daemon.ErrNoDaemon) && !errors.Is(err, daemon.ErrDaemonLost) || time.Now().After(deadline) {
			return nil, st, &exitError{code: exitCorralError, msg: fmt.Sprintf("the corral daemon did not come up on %s within %s (see %s): %v", paths.Socket, daemonStartWait, paths.LogFile(), err)}
		}
		select {
		case <-ctx.Done():
			return nil, st, ctx.Err()
		case <-time.After(interval):
		}
	}
}

// daemonUnavailable is the error of every command that needs the daemon
// where it does not run (noDaemonReason): one line saying what to use
// instead, rather than a socket error from deep down.
func daemonUnavailable() error {
	if noDaemonReason == "" {
		return nil
	}
	return &exitError{code: exitCorralError, msg: noDaemonReason + ", and this command needs it: " + noDaemonInstead}
}

// noDaemonInstead says what works without the daemon.
const noDaemonInstead = "run commands with corral run --no-daemon (corral mcp and acp: --in-process)"

// spawnDaemon starts `corrald serve` detached: its own session (no
// terminal signals reach it), stdin from /dev/null, output appended to the
// log file. A second daemon started concurrently by another CLI call finds
// the lock taken and exits at once, so racing starts are harmless.
func spawnDaemon(paths daemon.Paths) (int, error) {
	exe, err := selfOrEngine()
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(paths.StateDir, 0o700); err != nil {
		return 0, err
	}
	logf, err := os.OpenFile(paths.LogFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.Command(exe, "serve", "--log-level", "info", "--quiet-if-running")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	cmd.SysProcAttr = daemonProcAttr()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	pid := cmd.Process.Pid
	// Reap it if it exits while we still run (lost a start race); after we
	// exit, init does.
	go cmd.Wait()
	return pid, nil
}

// exitStatuses is the CLI translation of the error classes: the exit
// status of a command whose request the daemon refused. A request that
// names no process the daemon knows, or that is malformed, is a usage
// error (2), as docs/api.md promises; anything else is corral's own
// failure (125). Every class is listed, so that a class added to errclass
// and forgotten here fails TestEveryClassHasAnExitStatus. The CLI hears of
// env's classes only as the daemon answers them: InvalidSpec as
// invalid_spec (which run alone reports as a failed start),
// StdinClosed as not_running, the others as internal errors.
var exitStatuses = map[errclass.Class]int{
	errclass.InvalidID:   exitUsage,
	errclass.Ambiguous:   exitUsage,
	errclass.NotFound:    exitUsage,
	errclass.Invalid:     exitUsage,
	errclass.InvalidSpec: exitUsage,

	errclass.Running:     exitCorralError,
	errclass.NotRunning:  exitCorralError,
	errclass.StdinClosed: exitCorralError,
	errclass.Limit:       exitCorralError,
	errclass.Closed:      exitCorralError,
	errclass.WaitTimeout: exitCorralError,
	errclass.ProcessGone: exitCorralError,
	errclass.Unsupported: exitCorralError,
	errclass.SandboxGone: exitCorralError,
	errclass.Released:    exitCorralError,
	errclass.Exited:      exitCorralError,
	errclass.Unavailable: exitCorralError,
	errclass.NameInUse:   exitCorralError,
}

// procError is a request about one process that the daemon refused; id is
// the process as the user named it, so that a hint can name the command
// to run next.
type procError struct {
	id  string
	err error
}

func (e *procError) Error() string { return e.err.Error() }
func (e *procError) Unwrap() error { return e.err }

// hint says which command helps after err, or "". The registry's message
// says what is wrong in its own terms; the commands are the CLI's.
func hint(err error) string {
	switch errclass.Of(err) {
	case errclass.NotFound:
		return "`corral ps --all` lists the tracked processes"
	case errclass.NameInUse:
		return "--replace kills it, then starts this command"
	case errclass.Running:
		var pe *procError
		if errors.As(err, &pe) {
			return fmt.Sprintf("corral kill %s, or corral rm --force %s", pe.id, pe.id)
		}
	}
	return ""
}

// daemonError maps errors of the daemon, one for each request of the
// command that failed, to corral's exit status (usage, when one of them
// is a usage error) and one message with a line for each, its hint
// added.
func daemonError(op string, errs ...error) error {
	code := exitCorralError
	lines := make([]string, 0, len(errs))
	for _, err := range errs {
		if exitStatuses[errclass.Of(err)] == exitUsage {
			code = exitUsage
		}
		// The package prefixes say nothing to a user of the command.
		msg := strings.NewReplacer("registry: ", "", "daemon: ", "").Replace(err.Error())
		// "start: start: …" says the operation twice.
		msg = strings.TrimPrefix(msg, op+": ")
		if h := hint(err); h != "" {
			msg += " (" + h + ")"
		}
		lines = append(lines, msg)
	}
	return &exitError{code: code, msg: op + ": " + strings.Join(lines, "\n")}
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// parseLabelFlags turns repeated --label k=v into a map: the registry
// reads them (registry.ParseLabels), the CLI names its flag.
func parseLabelFlags(op string, kvs []string) (map[string]string, error) {
	m, err := registry.ParseLabels(kvs)
	if err != nil {
		return nil, usageErrorf("%s: --%s", op, strings.TrimPrefix(err.Error(), registry.ErrInvalidOptions.Error()+": "))
	}
	return m, nil
}
