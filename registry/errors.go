package registry

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors of the registry. Every error the registry returns that a
// caller may branch on matches one of these through errors.Is; the message
// around it says what was wrong and what to do.
var (
	// ErrInvalidID: the argument is not a process ID of the form
	// "proc_" + 12 lowercase hex digits, nor a prefix of at least 4 hex
	// digits (with or without "proc_").
	ErrInvalidID = errors.New("registry: invalid process ID")

	// ErrNotFound: no tracked process has that ID (it never existed, was
	// removed, or was pruned after FinishedTTL). It also matches
	// env.ErrNotFound when the environment reported the process gone.
	ErrNotFound = errors.New("registry: no such process")

	// ErrAmbiguous: an ID prefix matches more than one process. The error
	// is an *AmbiguousError listing the candidates.
	ErrAmbiguous = errors.New("registry: ambiguous process ID prefix")

	// ErrLimit: Config.MaxProcesses processes are tracked and all of them
	// are still running, so nothing can be pruned to make room.
	ErrLimit = errors.New("registry: process limit reached")

	// ErrWaitTimeout: Wait's timeout elapsed before the process finished.
	ErrWaitTimeout = errors.New("registry: wait timed out")

	// ErrRunning: the operation (Remove) needs a finished process.
	ErrRunning = errors.New("registry: process is still running")

	// ErrNotRunning: the operation (Write, Submit, CloseStdin) needs a
	// running process.
	ErrNotRunning = errors.New("registry: process is not running")

	// ErrInvalidOptions: an option is malformed (a bad regular expression,
	// a negative duration, an unknown backend target).
	ErrInvalidOptions = errors.New("registry: invalid options")

	// ErrClosed: the Registry was closed.
	ErrClosed = errors.New("registry: closed")
)

// AmbiguousError reports an ID prefix that matches several processes. It
// matches ErrAmbiguous.
type AmbiguousError struct {
	Prefix     string
	Candidates []string // full IDs, sorted
}

func (e *AmbiguousError) Error() string {
	return fmt.Sprintf("registry: ID prefix %q matches %d processes (%s): give more hex digits",
		e.Prefix, len(e.Candidates), strings.Join(e.Candidates, ", "))
}

// Is makes every AmbiguousError match ErrAmbiguous.
func (e *AmbiguousError) Is(target error) bool { return target == ErrAmbiguous }
