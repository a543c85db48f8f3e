package registry

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/corralhq/corral/internal/errclass"
)

// Sentinel errors of the registry. Every error the registry returns that a
// caller may branch on matches one of these through errors.Is; the message
// around it says what was wrong and what to do, in the registry's own terms
// (kill it first, remove with force): the front ends add how, in theirs (a
// command, a tool action), chosen by class. Each declares its class
// (internal/errclass), which is how the daemon, the CLI and the MCP server
// translate it.
var (
	// ErrInvalidID: the argument is not a process ID of the form
	// "proc_" + 12 lowercase hex digits, nor a prefix of at least 4 hex
	// digits (with or without "proc_").
	ErrInvalidID = errclass.New(errclass.InvalidID, "registry: invalid process ID")

	// ErrNotFound: no tracked process has that ID (it never existed, was
	// removed, or was pruned after FinishedTTL). It also matches
	// env.ErrNotFound when the environment reported the process gone.
	ErrNotFound = errclass.New(errclass.NotFound, "registry: no such process")

	// ErrAmbiguous: an ID prefix matches more than one process. The error
	// is an *AmbiguousError listing the candidates.
	ErrAmbiguous = errclass.New(errclass.Ambiguous, "registry: ambiguous process ID prefix")

	// ErrLimit: Config.MaxProcesses processes are tracked and all of them
	// are still running, so nothing can be pruned to make room.
	ErrLimit = errclass.New(errclass.Limit, "registry: process limit reached")

	// ErrWaitTimeout: Wait's timeout elapsed before the process finished.
	ErrWaitTimeout = errclass.New(errclass.WaitTimeout, "registry: wait timed out")

	// ErrRunning: the operation (Remove) needs a finished process.
	ErrRunning = errclass.New(errclass.Running, "registry: process is still running")

	// ErrNotRunning: the operation (Write, Submit, CloseStdin) needs a
	// running process.
	ErrNotRunning = errclass.New(errclass.NotRunning, "registry: process is not running")

	// ErrInvalidOptions: an option is malformed (a bad regular expression,
	// a negative duration, an unknown backend target).
	ErrInvalidOptions = errclass.New(errclass.Invalid, "registry: invalid options")

	// ErrNameInUse: StartOptions.Name is held by a process whose tree
	// still runs and that is not the same command (backend, command,
	// directory, environment), and Replace was not asked for. The message
	// names the holder's ID and command.
	ErrNameInUse = errclass.New(errclass.NameInUse, "registry: name in use")

	// ErrClosed: the Registry was closed.
	ErrClosed = errclass.New(errclass.Closed, "registry: closed")

	// ErrUnreachable: a kill could not reach the process's backend (it is
	// paused, down or silent), so the tree was not killed, or its end not
	// verified. The kill is pending: it runs again once the backend
	// answers (KillResult.Unreachable, Info.KillPending). It matches
	// env.ErrUnavailable's class.
	ErrUnreachable = errclass.New(errclass.Unavailable, "registry: backend unreachable")
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

// Is makes every AmbiguousError match ErrAmbiguous, and what ErrAmbiguous
// matches (its class).
func (e *AmbiguousError) Is(target error) bool {
	return target == ErrAmbiguous || errors.Is(ErrAmbiguous, target)
}

// StateFileError is the error of a start refused because Config.StateFile
// could not be written (a full disk, a read-only file system): nothing
// runs without a record the next registry finds, so nothing was started
// (or what started was killed again). Err is the cause.
type StateFileError struct {
	Path string
	Err  error
}

func (e *StateFileError) Error() string {
	todo := "make it writable"
	if errors.Is(e.Err, syscall.ENOSPC) || errors.Is(e.Err, syscall.EDQUOT) {
		todo = "free space on its file system"
	}
	return fmt.Sprintf("registry: the state file %s cannot be written (%v), so nothing was started: %s, then start again",
		e.Path, e.Err, todo)
}

func (e *StateFileError) Unwrap() error { return e.Err }
