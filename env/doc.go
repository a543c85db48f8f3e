// Package env defines the Environment contract that corral's registry drives:
// one sandbox (the local machine, one container, one remote host) in which
// processes are started, watched, fed stdin, signalled as a whole tree and
// waited for.
//
// # The contract in brief
//
// An [Environment] starts a [Process] from a [Spec]: a shell command line
// run by the sandbox's /bin/sh -c, a working directory, extra environment
// variables, a PTY or pipes, and stdin or not. A [Process] offers its merged
// stdout+stderr as a byte stream that can be opened from any byte offset,
// stdin write and close, a signal delivered to its whole process tree, and
// Wait, which reports an [ExitStatus]: the exit code, or the name of the
// signal that ended it.
//
// A process started with [Spec.Detach] outlives the supervising program:
// [Process.Ref] returns a serialisable [Ref] from which a new Environment
// value — in a new supervisor, after a crash — re-attaches with
// [Environment.Attach], with the full output and the real exit status.
// [Capabilities] says which of these an Environment supports and which
// mechanism it uses to end a process tree.
//
// A supervisor that dies inside Start never gets the Ref. An Environment
// that is a [TagFinder] finds such a process by the [Spec.Tag] it was
// started with (the registry's process ID), so that the next supervisor can
// end it: nothing runs without a record or a tag the next one looks for.
//
// # Concurrency
//
// Environment and Process values are safe for concurrent use by multiple
// goroutines. Output streams are independent: several may be open on one
// process at once where [Capabilities.ReplayOutput] is true.
//
// # Release
//
// [Process.Release] drops the handle's resources (goroutines, descriptors,
// connections) without stopping the process. [Environment.Close] releases
// the environment: processes started without Detach are killed (whole
// tree), detached ones keep running and can be re-attached. After release
// every method returns an error matching [ErrReleased]; Close and Release
// are idempotent.
//
// # Optional interfaces
//
// An Environment may offer more, which a supervisor finds by type
// assertion: [ConnReporter] (the connection it holds), [PortLister],
// [TreePortLister] (every tree's listeners in one look), [PortWaiter] and
// [URLChecker] (dev servers), and [HealthChecker], a cheap check, made in
// the background with a short deadline, of whether the sandbox answers
// ([Condition]: ok, paused, unreachable, gone).
//
// # Errors
//
// Errors a caller must branch on match the sentinel values of this package
// through errors.Is: [ErrNotFound], [ErrUnsupported], [ErrSandboxGone],
// [ErrReleased], [ErrExited], [ErrInvalidSpec], [ErrDirNotFound],
// [ErrStdinClosed], [ErrUnavailable]. Backends wrap them with the operation
// and the target, for example "docker: start in c0ffee: env: sandbox is gone".
package env
