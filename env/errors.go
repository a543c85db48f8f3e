package env

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/corralhq/corral/internal/errclass"
)

// Sentinel errors of the contract. Backends wrap them with context; callers
// test for them with errors.Is. Each declares its class (internal/errclass),
// which is how the daemon, the CLI, the MCP server and the plugin wire
// translate it.
var (
	// ErrNotFound: the process a Ref names does not exist in the sandbox (its
	// state was removed, or it never existed there).
	ErrNotFound = errclass.New(errclass.ProcessGone, "env: process not found")

	// ErrUnsupported: the Environment cannot do what was asked (a PTY on a
	// backend without one, re-attach of a process that was not detached, …).
	// Capabilities says in advance what is supported.
	ErrUnsupported = errclass.New(errclass.Unsupported, "env: not supported by this backend")

	// ErrSandboxGone: the sandbox itself (container, host) disappeared; its
	// processes are lost.
	ErrSandboxGone = errclass.New(errclass.SandboxGone, "env: sandbox is gone")

	// ErrReleased: the Environment was closed or the Process handle released.
	ErrReleased = errclass.New(errclass.Released, "env: used after release")

	// ErrExited: the operation needs a running process, and it has already
	// exited. Signal returns it when the process ended before the signal
	// could be delivered; Wait then reports the real status.
	ErrExited = errclass.New(errclass.Exited, "env: process already exited")

	// ErrInvalidSpec: the Spec was rejected before anything ran. The error is
	// a *SpecError naming the field.
	ErrInvalidSpec = errclass.New(errclass.InvalidSpec, "env: invalid spec")

	// ErrDirNotFound: the working directory does not exist (or is not a
	// directory) in the sandbox. It also matches ErrInvalidSpec.
	ErrDirNotFound = errclass.New(errclass.InvalidSpec, "env: working directory not found")

	// ErrStdinClosed: stdin was not requested in the Spec, or was closed.
	ErrStdinClosed = errclass.New(errclass.StdinClosed, "env: stdin is closed")

	// ErrUnavailable: the backend cannot be reached right now (a plugin
	// process died, a connection dropped and is being re-established). The
	// process may still be running; retrying later may succeed.
	ErrUnavailable = errclass.New(errclass.Unavailable, "env: backend unavailable")
)

// SpecError reports a Spec field that was rejected. It matches
// ErrInvalidSpec, and Err when set (for example ErrDirNotFound).
type SpecError struct {
	Field  string // Spec field name, e.g. "Dir"
	Value  string // the offending value, quoted in the message
	Reason string // what is wrong and what to do
	Err    error  // optional, more specific sentinel
}

func (e *SpecError) Error() string {
	if e.Value != "" {
		// A value is shown for what it is, never at length: an
		// environment entry may be megabytes.
		v := e.Value
		if len(v) > maxShownValue {
			n := maxShownValue
			for n > 0 && !utf8.RuneStart(v[n]) {
				n--
			}
			v = v[:n] + "…"
		}
		return fmt.Sprintf("invalid spec: %s %q: %s", e.Field, v, e.Reason)
	}
	return fmt.Sprintf("invalid spec: %s: %s", e.Field, e.Reason)
}

// maxShownValue bounds how much of SpecError.Value its message shows.
const maxShownValue = 80

// Is makes every SpecError match ErrInvalidSpec, and what ErrInvalidSpec
// matches (its class).
func (e *SpecError) Is(target error) bool {
	return target == ErrInvalidSpec || errors.Is(ErrInvalidSpec, target)
}

// Unwrap returns the more specific sentinel, if any.
func (e *SpecError) Unwrap() error { return e.Err }
