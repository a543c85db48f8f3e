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
