package nohup

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Transport runs short POSIX sh scripts inside one sandbox. It is all a
// sandbox backend (docker, ssh, a plugin) brings; the process engine in this
// package does the rest.
//
// Implementations are safe for concurrent use.
//
// # The contract
//
// The engine starts a command with one Exec and finds it again with later
// ones (to poll, signal, write stdin), so:
//
//   - Every Exec reaches the same long-lived sandbox: the same process
//     namespace and the same filesystem (BaseDir above all), for as long
//     as the Env lives, and across Envs opened on the same target when
//     processes are to be re-attached. A design that creates a sandbox per
//     Exec (one `unshare … sh -c SCRIPT`, one `docker run --rm`) does not
//     work: the second Exec finds nothing of the first.
//   - Processes a script leaves behind outlive the script. The engine's
//     scripts start the command in the background (setsid) and exit; the
//     transport must not kill what remains when the script's shell ends:
//     no process group kill, no PID namespace that dies with the script,
//     no cgroup torn down per Exec.
//   - The sandbox's PID 1 reaps orphans. The engine's background processes
//     are orphaned by design; a PID 1 that never calls wait (a plain
//     `sleep infinity`, a program run as init) collects them as zombies,
//     which fill the sandbox's process table until its pids limit stops
//     every start. Use an init that reaps
//     (docker --init, tini, bwrap's own init, or a keep-alive loop in sh
//     as PID 1: `unshare --pid --fork sh -c 'while :; do sleep 1; done'`
//     reaps what it adopts while it waits).
//
// # Exec
//
// Exec runs script as /bin/sh -c script inside the sandbox.
//
//   - stdin may be nil: the script then reads end of file.
//   - stdout is never nil. Copy the script's stdout to it as it arrives,
//     not once the script ended: a follow (Output and Wait of a running
//     process) is one Exec whose stdout is read while the script runs.
//   - stderr may be nil: discard the script's stderr then.
//   - The exit code is the script's: its exit status, or 128+N when
//     signal N killed the script's shell (what a shell's $? and ssh's
//     exit-status say; sdk.ScriptExit maps an *exec.ExitError so). The
//     engine treats every non-zero code as the script's failure.
//   - A non-nil error means the result is unknown: the script could not be
//     started or the transport failed while it ran. Such errors match
//     env.ErrSandboxGone when the sandbox no longer exists (container
//     removed or stopped) and env.ErrUnavailable when it cannot be reached
//     right now (connection dropped); the engine retries the latter.
//   - When ctx ends, end the script's shell inside the sandbox, not only
//     the local program that entered it (nsenter, a runtime's exec client
//     fork): a child left running keeps the pipes, and the Exec, open.
//     Return once the script has exited and all its output was copied.
type Transport interface {
	// Exec runs script as /bin/sh -c script inside the sandbox, copying
	// stdin (may be nil) to its stdin and its stdout and stderr (may be
	// nil) to the given writers, and returns its exit code (see the type's
	// doc for the whole contract).
	Exec(ctx context.Context, script string, stdin io.Reader, stdout, stderr io.Writer) (exitCode int, err error)
}

// ShellTransport is a Transport that can also start a long-lived shell
// inside the sandbox. The engine keeps up to Options.Residents such shells
// running with its library loaded (resident shells) and sends them its
// calls, so that a call costs one request and one reply on streams that are
// already open: no new exec or session, no new shell, no library to parse.
// The protocol on the streams is the engine's own; the transport only
// carries bytes. When no shell can be started, or the shells keep failing,
// the engine runs its calls through Exec.
type ShellTransport interface {
	Transport
	// OpenShell starts /bin/sh -c script inside the sandbox, with its
	// stdin, stdout and stderr on the returned Shell's streams, and returns
	// once it runs. It should fail fast rather than wait for a session slot
	// or a connection: the call is then run through Exec, which may wait.
	// The shell must outlive ctx, which bounds only the opening.
	OpenShell(ctx context.Context, script string) (*Shell, error)
}

// CallTracker is what a ShellTransport that closes idle connections
// implements: the engine calls TrackCall when a call on a resident shell
// begins and the returned function when it ends, so that a connection is
// never closed under a call it cannot see.
type CallTracker interface {
	TrackCall() (done func())
}

// Shell is a shell started by OpenShell: its three streams and how to end
// it.
type Shell struct {
	Stdin  io.Writer
	Stdout io.Reader
	Stderr io.Reader
	// Stop ends the shell: it closes the streams, so that blocked reads of
	// Stdout and Stderr return, and the shell reads end of file. It may be
	// called more than once.
	Stop func() error
}

// ForkFailed recognises a shell's complaint that it could not fork (the
// sandbox's pids limit is exhausted, say by a fork bomb): the script it
// was given did not run, and a retry may well succeed.
func ForkFailed(stderr []byte) bool {
	s := strings.ToLower(string(stderr))
	return strings.Contains(s, "can't fork") || strings.Contains(s, "cannot fork") ||
		strings.Contains(s, "fork: resource temporarily unavailable") || strings.Contains(s, "fork: retry")
}

// StartShell starts cmd, a local program that runs the script OpenShell was
// given (sh -c SCRIPT, or a command that enters the sandbox and runs it
// there, such as nsenter or a container runtime's exec), with its stdin,
// stdout and stderr on pipes, and returns it as a Shell. The program gets
// a process group of its own. Stop closes stdin and the output pipes at
// once, so that blocked reads return and the shell reads end of file, as a
// closed ssh session or docker exec would make it, and hangs the group up
// (SIGHUP), which also ends a call in flight; the shell, a resident, then
// removes the spares it armed and exits (see residentLoop). What is left of
// the group after shellExitGrace is killed; the program is reaped in the
// background. cmd must not be tied to the context OpenShell was given: the
// shell outlives it.
func StartShell(cmd *exec.Cmd) (*Shell, error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	ownGroup(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start shell %s: %w", cmd.Path, err)
	}
	exited := make(chan struct{})
	go func() {
		// Wait closes the pipes too; Stop may have closed them first.
		_ = cmd.Wait()
		close(exited)
	}()
	return &Shell{Stdin: stdin, Stdout: stdout, Stderr: stderr, Stop: sync.OnceValue(func() error {
		_ = stdin.Close()
		_ = stdout.Close()
		_ = stderr.Close()
		select {
		case <-exited:
			return nil
		default:
		}
		hangUp(cmd)
		go func() {
			t := time.NewTimer(shellExitGrace)
			defer t.Stop()
			select {
			case <-exited:
			case <-t.C:
				killShell(cmd)
				<-exited
			}
		}()
		return nil
	})}, nil
}

// shellExitGrace is how long a shell StartShell started has, once stopped,
// to end by itself before it is killed.
const shellExitGrace = 5 * time.Second
