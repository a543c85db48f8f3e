// Package errclass is corral's one table of error classes. A class is what
// a caller can do about an error (give a valid ID, kill the process first,
// retry later, …); every sentinel of env and registry declares its class
// where it is defined, with New. The front ends and the plugin wire do not
// classify sentinels: each keeps one translation of classes into its own
// terms (a gRPC code, an HTTP status and JSON code, a CLI exit status, an
// MCP hint), and a test of each walks [Classes], so a class that one of
// them forgets fails that test.
//
// Two sentinels share a class only when they mean the same to a caller and
// every transport already answered them alike, so that no status code
// changed when the classes came. That makes the classes nearly as fine as
// the sentinels: env.ErrNotFound (the sandbox lost a process) is a backend
// failure, answered 500, while registry.ErrNotFound (no such ID) is a bad
// request, answered 404. env.ErrExited, env.ErrReleased and
// env.ErrSandboxGone travel alike but ask different things of a caller, so
// they are classes of their own. env.ErrDirNotFound is of class
// InvalidSpec: it always comes inside a *env.SpecError, an invalid spec.
// (The plugin wire's proto kinds keep every env sentinel apart anyway, so
// the host re-creates the very sentinel.)
//
// The package is a leaf, imported by env and registry alike: env cannot
// import registry, and a table that imported both would link the registry
// into every plugin binary through plugins/internal/wire. It is internal:
// callers outside corral keep matching sentinels with errors.Is.
package errclass

import (
	"errors"
	"strconv"
)

// Class is a kind of failure a caller can act on. The zero value, Unknown,
// is no class at all.
type Class uint8

// The classes, in order of precedence: an error of several classes (a
// registry error wrapping the env error that caused it) is of the first.
const (
	// Unknown: not one of corral's sentinels (a backend failure, a
	// transport error).
	Unknown Class = iota

	// InvalidID: the argument is not a process ID nor a prefix of one
	// (registry.ErrInvalidID).
	InvalidID
	// Ambiguous: the ID prefix names several processes
	// (registry.ErrAmbiguous).
	Ambiguous
	// NotFound: no tracked process has that ID (registry.ErrNotFound).
	NotFound
	// Invalid: a malformed option of the request
	// (registry.ErrInvalidOptions).
	Invalid
	// InvalidSpec: the backend rejected the spec before anything ran
	// (env.ErrInvalidSpec, env.ErrDirNotFound).
	InvalidSpec
	// Running: the operation needs a finished process (registry.ErrRunning).
	Running
	// NotRunning: the operation needs a running process
	// (registry.ErrNotRunning).
	NotRunning
	// StdinClosed: the process has no stdin, or it was closed
	// (env.ErrStdinClosed).
	StdinClosed
	// Limit: too many processes are tracked (registry.ErrLimit).
	Limit
	// Closed: the registry was closed (registry.ErrClosed).
	Closed
	// WaitTimeout: a wait ended before the process did
	// (registry.ErrWaitTimeout).
	WaitTimeout
	// ProcessGone: the sandbox has no process by that reference
	// (env.ErrNotFound).
	ProcessGone
	// Unsupported: the backend cannot do it (env.ErrUnsupported).
	Unsupported
	// SandboxGone: the container or host disappeared (env.ErrSandboxGone).
	SandboxGone
	// Released: the Environment or Process was used after release
	// (env.ErrReleased).
	Released
	// Exited: the process exited before the operation reached it
	// (env.ErrExited).
	Exited
	// Unavailable: the backend cannot be reached right now
	// (env.ErrUnavailable).
	Unavailable
	// NameInUse: a live process holds the name asked for
	// (registry.ErrNameInUse).
	NameInUse

	numClasses
)

var names = [numClasses]string{
	Unknown:     "unknown",
	InvalidID:   "invalid-id",
	Ambiguous:   "ambiguous",
	NotFound:    "not-found",
	Invalid:     "invalid",
	InvalidSpec: "invalid-spec",
	Running:     "running",
	NotRunning:  "not-running",
	StdinClosed: "stdin-closed",
	Limit:       "limit",
	Closed:      "closed",
	WaitTimeout: "wait-timeout",
	ProcessGone: "process-gone",
	Unsupported: "unsupported",
	SandboxGone: "sandbox-gone",
	Released:    "released",
	Exited:      "exited",
	Unavailable: "unavailable",
	NameInUse:   "name-in-use",
}

func (c Class) String() string {
	if c < numClasses {
		return names[c]
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// Classes returns every class but Unknown, in order of precedence.
func Classes() []Class {
	cs := make([]Class, 0, numClasses-1)
	for c := Unknown + 1; c < numClasses; c++ {
		cs = append(cs, c)
	}
	return cs
}

// New returns a sentinel error of class c with the message msg. Sentinels
// are compared by identity, as errors.New's are; besides, errors.Is
// matches each against its class (see [Is]).
func New(c Class, msg string) error {
	return &sentinel{class: c, msg: msg}
}

type sentinel struct {
	class Class
	msg   string
}

func (s *sentinel) Error() string { return s.msg }

// Is makes the sentinel match its class's marker.
func (s *sentinel) Is(target error) bool { return target == marker(s.class) }

// marker is what errors.Is looks for when asked about a class. It never
// leaves this package: no error outside it can equal one by accident.
type marker Class

func (m marker) Error() string { return "errclass: " + Class(m).String() }

// Is reports whether err, or an error it wraps, is of class c: a sentinel
// of c, or an error whose Is method stands for c (see [Match]).
func Is(err error, c Class) bool {
	return c != Unknown && errors.Is(err, marker(c))
}

// Of returns the class of err: the first class, in order of precedence,
// that err is of (see [Is]); Unknown when it is of none.
func Of(err error) Class {
	if err == nil {
		return Unknown
	}
	for c := Unknown + 1; c < numClasses; c++ {
		if Is(err, c) {
			return c
		}
	}
	return Unknown
}

// Match reports whether target, the argument of an Is method, stands for
// class c: it is a sentinel of c, or c's own marker. An error decoded from
// a transport, which knows only the class it crossed as, implements Is
// with it, so that errors.Is(err, registry.ErrNotFound) holds on the
// client as it did on the server.
func Match(target error, c Class) bool {
	if c == Unknown {
		return false
	}
	if m, ok := target.(marker); ok {
		return Class(m) == c
	}
	s, ok := target.(*sentinel)
	return ok && s.class == c
}
