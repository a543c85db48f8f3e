package env

import (
	"context"
	"encoding/json"
	"io"
)

// Environment is one sandbox in which processes run: the local machine, one
// container, one remote host, or whatever a plugin provides.
//
// Implementations are safe for concurrent use.
type Environment interface {
	// Name identifies the environment in messages and in Refs, for example
	// "local", "docker://web-1" or "ssh://ci@build-host:22".
	Name() string

	// Capabilities reports what this environment supports.
	Capabilities() Capabilities

	// Start starts spec.Command. It returns once the process runs (or fails
	// to start: a bad spec, a missing working directory, an unreachable
	// sandbox). The context bounds only the start itself; cancelling it
	// later does not affect the process.
	Start(ctx context.Context, spec Spec) (Process, error)

	// Attach re-attaches to a process started, with Detach, by this or an
	// earlier Environment value on the same sandbox, possibly in another
	// supervisor process. The returned Process behaves like the original:
	// output from any offset, Wait with the real exit status (even if the
	// process ended while nobody was attached), Signal to the whole tree.
	// A Ref whose process state no longer exists returns ErrNotFound; a
	// sandbox that disappeared returns ErrSandboxGone.
	Attach(ctx context.Context, ref Ref) (Process, error)

	// Close releases the environment. Processes started without Detach are
	// killed with their whole tree; detached processes keep running.
	// Sandboxes the environment created itself (a container from an image)
	// may be removed, as the backend documents. Close is idempotent; every
	// other method afterwards returns ErrReleased.
	Close() error
}

// Process is a started process, seen from the supervisor.
//
// All methods are safe for concurrent use. After Release, every method
// returns ErrReleased (Release itself returns nil).
type Process interface {
	// PID is the process's ID inside its sandbox (0 if the backend has none
	// to show). Informational: never signal it directly.
	PID() int

	// Output returns the process's merged stdout and stderr from byte
	// offset on (the first byte the process wrote is offset 0). Reads block
	// until more output arrives; the stream ends with io.EOF once the
	// process has exited and all its output has been delivered. Output that
	// descendants still write after the process exited is collected for a
	// short, backend-documented grace and then the stream ends: a
	// grandchild holding the output open never makes a reader hang.
	//
	// Where Capabilities.ReplayOutput is true, Output may be called any
	// number of times with any offset up to the bytes written so far.
	// Otherwise the stream is live: it may be opened once, and offset
	// bytes are skipped. Closing the reader does not affect the process.
	Output(ctx context.Context, offset int64) (io.ReadCloser, error)

	// Write writes p to the process's stdin. It returns ErrStdinClosed when
	// the Spec did not ask for stdin or CloseStdin was called, and ErrExited
	// once the process has exited.
	Write(ctx context.Context, p []byte) (int, error)

	// CloseStdin closes stdin so the process reads EOF. Closing twice is not
	// an error.
	CloseStdin(ctx context.Context) error

	// Signal delivers sig to every process of the tree: the process, its
	// descendants, and those that left its process group or session
	// (setsid, double fork) as far as Capabilities.TreeKill allows. The
	// target's identity is checked first, so a reused PID is never hit.
	// If the process has already exited, Signal returns ErrExited and Wait
	// reports the real status; the signal still goes to what is left of
	// the tree (descendants that outlived the process: `cmd &`, a server
	// that daemonised), as far as TreeKill reaches, so that a supervisor
	// can end them. Survivors lists them.
	Signal(ctx context.Context, sig Signal) error

	// Survivors returns the PIDs of processes of the tree that are still
	// alive, including escapees; empty means nothing of the tree is left.
	// Used to verify a kill.
	Survivors(ctx context.Context) ([]int, error)

	// Wait blocks until the process exits and returns how it ended, or
	// until ctx is done (returning ctx.Err()). It may be called any number
	// of times, concurrently. With an error it returns NoStatus, never a
	// zero ExitStatus that reads as "exit status 0".
	Wait(ctx context.Context) (ExitStatus, error)

	// Resize changes the PTY's window size. ErrUnsupported without a PTY.
	Resize(ctx context.Context, size WindowSize) error

	// Ref returns the serialisable reference to re-attach with
	// Environment.Attach. ErrUnsupported when the process was not detached.
	Ref() (Ref, error)

	// Release drops the handle's resources without stopping the process.
	// The process's state inside the sandbox (its output, its exit status)
	// stays, so a later Attach still finds it.
	Release() error

	// Remove deletes the process's state inside the sandbox (output, exit
	// status) and releases the handle. It refuses with an error while the
	// process runs; kill it first.
	Remove(ctx context.Context) error
}

// Ref is a serialisable reference to a detached process. It is plain data:
// store it as JSON and hand it to Attach on an Environment of the same
// backend and sandbox after a restart.
type Ref struct {
	// Env is the Name of the Environment that started the process.
	Env string `json:"env"`
	// PID is the process's ID inside the sandbox, for display.
	PID int `json:"pid,omitempty"`
	// Data is backend-specific (state directory, start time, …).
	Data json.RawMessage `json:"data"`
}

// Capabilities reports what an Environment supports.
type Capabilities struct {
	// PTY: Spec.PTY is supported.
	PTY bool `json:"pty"`
	// Resize: the PTY window can be resized after start.
	Resize bool `json:"resize"`
	// Stdin: Spec.Stdin and Process.Write are supported.
	Stdin bool `json:"stdin"`
	// Reattach: Spec.Detach is supported, and Attach works across
	// supervisor restarts.
	Reattach bool `json:"reattach"`
	// ReattachPTY: a detached process may also have a PTY.
	ReattachPTY bool `json:"reattach_pty"`
	// ReplayOutput: Output may be opened repeatedly from any offset, for
	// every process. When false it holds only for detached processes.
	ReplayOutput bool `json:"replay_output"`
	// TreeKill names the mechanism that ends a process tree, for example
	// "cgroup" (everything in the process's cgroup, escapees included),
	// "pgroup+scan" (process group plus a scan for descendants that left
	// it), "job-object" (Windows) or "pgroup" (process group only).
	TreeKill string `json:"tree_kill"`
	// Ports: Processes (and the Environment) implement PortLister.
	Ports bool `json:"ports,omitempty"`
	// InputWait: the Environment implements InputWatcher (a plugin's
	// carries it across the protocol's input_wait).
	InputWait bool `json:"input_wait,omitempty"`
	// CheckURL: the Environment implements URLChecker and finds an HTTP
	// client in its sandbox.
	CheckURL bool `json:"check_url,omitempty"`
	// Limits names the Spec.Limits the backend enforces (LimitMemory,
	// LimitCPUs, LimitPids); LimitsNote says, when one is missing, why and
	// what to do instead, in one sentence a refusal can carry.
	Limits     []string `json:"limits,omitempty"`
	LimitsNote string   `json:"limits_note,omitempty"`
	// SandboxLimits are the limits the sandbox as a whole runs under (a
	// docker-image:// sandbox's memory, cpus and pids), shared by all its
	// processes; nil where there are none or they are not known. An OOM
	// kill of a process without a memory limit of its own names the
	// sandbox's.
	SandboxLimits *Limits `json:"sandbox_limits,omitempty"`
	// Notes lists limits in plain words, for `corral doctor` and logs.
	Notes []string `json:"notes,omitempty"`
}
