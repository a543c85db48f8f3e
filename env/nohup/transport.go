package nohup

import (
	"context"
	"io"
)

// Transport runs short POSIX sh scripts inside one sandbox. It is all a
// sandbox backend (docker, ssh, a plugin) brings; the process engine in this
// package does the rest.
//
// Implementations are safe for concurrent use.
type Transport interface {
	// Exec runs script as /bin/sh -c script inside the sandbox, copying
	// stdin (may be nil: the script reads EOF) to its stdin and its stdout
	// and stderr to the given writers (stderr may be nil: discarded). It
	// returns the script's exit code once the script has exited and all its
	// output was copied.
	//
	// A non-nil error means the result is unknown: the script could not be
	// started or the transport failed while it ran. Such errors match
	// env.ErrSandboxGone when the sandbox no longer exists (container
	// removed or stopped) and env.ErrUnavailable when it cannot be reached
	// right now (connection dropped); the engine retries the latter.
	Exec(ctx context.Context, script string, stdin io.Reader, stdout, stderr io.Writer) (exitCode int, err error)
}

// LibTransport is a Transport that can keep shells running inside the
// sandbox with a library of shell functions already loaded, so that a call
// costs neither a new session nor parsing the library again. The engine
// uses ExecLib, when the transport has it, for every script that reads no
// stdin; Resident and ResidentPool implement the shell side and the
// bookkeeping.
type LibTransport interface {
	Transport
	// ExecLib runs call (lines of sh using the functions and variables lib
	// defines) with stdin from /dev/null, in a subshell of a shell that has
	// evaluated lib, or else as lib followed by call in a new shell: the
	// two must not differ in effect. lib is the same string on every call
	// of one engine. Output, exit code and errors are as for Exec.
	//
	// after, when not empty, is more lib calls that the same shell runs
	// once call's results have been returned, in another subshell with
	// stdin, stdout and stderr on /dev/null, while nobody waits: work that
	// readies the sandbox for the next call. It is best effort; a
	// transport that cannot run it that way skips it.
	ExecLib(ctx context.Context, lib, call, after string, stdout, stderr io.Writer) (exitCode int, err error)
}
