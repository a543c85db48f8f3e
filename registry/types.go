package registry

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/duration"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultBackend      = "local"
	DefaultMaxProcesses = 256
	DefaultFinishedTTL  = 30 * time.Minute
	DefaultBufferSize   = 1 << 20
	DefaultHeadSize     = 64 << 10
	DefaultGrace        = 5 * time.Second
	// DefaultSubscriptionBuffer is how many undelivered events one
	// Subscription holds before it drops the oldest.
	DefaultSubscriptionBuffer = 1024
)

// Config configures a Registry. The zero value of every field but Open
// selects the documented default.
type Config struct {
	// Open resolves a backend target ("local", "docker://web",
	// "ssh://host", a plugin "NAME://…") to an Environment. It is called
	// lazily, once per distinct target; the registry caches the result and
	// closes it in Registry.Close. A failed Open is not cached. Required.
	Open func(ctx context.Context, target string) (env.Environment, error)

	// DefaultBackend is the target used when StartOptions.Backend is
	// empty. Default "local".
	DefaultBackend string

	// MaxProcesses bounds the number of tracked processes. When full, the
	// finished process that ended first is pruned; when every tracked
	// process is still running, Start and Run fail with ErrLimit.
	// Default 256.
	MaxProcesses int

	// FinishedTTL is how long a finished process stays tracked. Default
	// 30 minutes.
	FinishedTTL time.Duration

	// BufferSize bounds each process's output buffer in bytes (head plus
	// rolling tail). Default 1 MiB.
	BufferSize int

	// HeadSize is the part of BufferSize kept from the start of the
	// output. Default 64 KiB; it must be smaller than BufferSize.
	HeadSize int

	// DefaultGrace is the time between the polite signal and SIGKILL when
	// a kill or timeout does not choose one. Default 5 s.
	DefaultGrace time.Duration

	// SubscriptionBuffer bounds each Subscription's queue. Default 1024.
	SubscriptionBuffer int

	// Logger receives the registry's diagnostics. Default slog.Default().
	Logger *slog.Logger

	// StateFile, when set, is where the registry checkpoints its
	// processes on every state change (see checkpoint.go) and what
	// Registry.Recover reads after a restart. Its directory must exist.
	StateFile string

	// SessionReclaim is how long after Recover a session that running
	// processes name waits for its front end to open it again before its
	// processes are killed (see session.go). Default 10 s.
	SessionReclaim time.Duration

	// Runaway are the runaway thresholds of every process whose
	// StartOptions.Runaway is nil (see RunawayOptions); nil: none.
	Runaway *RunawayOptions

	// DisableStats turns the background sampler of process costs off:
	// Info.Stats stays nil and Stats reports no figures. It exists so that
	// `make bench` can measure what sampling costs against a registry that
	// does not sample; a supervisor leaves it false.
	DisableStats bool

	// InputQuiet is how long a process that could read input (a PTY, or
	// stdin kept open) must have been quiet, with no output and no input,
	// before it is looked at for waiting on input (Info.WaitingInput).
	// Default DefaultInputQuiet (1.5 s); negative turns the looks off.
	InputQuiet time.Duration
}

// State is a process's lifecycle state. A process moves from starting to
// running and then to exactly one final state; after a restart, a process
// the previous registry left unfinished is recovering until it is running
// again or settled in a final state.
type State string

// Process states.
const (
	StateStarting State = "starting"
	StateRunning  State = "running"
	// StateRecovering: the registry restarted (Recover) and is still
	// re-attaching the process, or, for a start the previous registry
	// never confirmed to its caller, ending what that start left
	// running. It then becomes running or a final state. Meanwhile Info
	// holds what the state file recorded; Kill, Write and Wait wait for
	// the outcome.
	StateRecovering State = "recovering"
	// StateExited: the process ended on its own; Status says how.
	StateExited State = "exited"
	// StateKilled: the process ended after Kill (or KillAll, or the
	// cancellation of Run's context) signalled it, whatever status it
	// then reported.
	StateKilled State = "killed"
	// StateTimedOut: Run's Timeout or IdleTimeout fired and the process
	// was killed; Info.TimedOut says which.
	StateTimedOut State = "timed_out"
	// StateLost: the environment reports the sandbox or process gone
	// while it ran; the exit status is unknown.
	StateLost State = "lost"
	// StateFailed: the process could not be started; Reason says why.
	StateFailed State = "failed"
)

// Final reports whether s is a final state.
func (s State) Final() bool {
	switch s {
	case StateExited, StateKilled, StateTimedOut, StateLost, StateFailed:
		return true
	}
	return false
}

// Valid reports whether s is one of the defined states.
func (s State) Valid() bool {
	return s == StateStarting || s == StateRunning || s == StateRecovering || s.Final()
}

// Timeout kinds recorded in Info.TimedOut and RunResult.TimedOut.
const (
	TimedOutTimeout = "timeout"
	TimedOutIdle    = "idle_timeout"
	// TimedOutTTL: StartOptions.TTL ran out (a ttl_expired event says so).
	TimedOutTTL = "ttl"
)

// Duration is a duration as corral writes and reads it on every wire (the
// daemon's API, MCP, the dashboard): a Go duration string ("1h0m0s") when
// written; seconds (3600, 2.5) or a Go duration string when read (see
// internal/duration). Info's durations have this type, so that a response
// says "ttl":"1h0m0s" as the request did "ttl":3600 or "1h", not a count of
// nanoseconds. D returns it as a time.Duration.
type Duration = duration.Duration

// Info is a snapshot of one tracked process. It is plain data.
type Info struct {
	ID      string            `json:"id"`
	Backend string            `json:"backend"`
	Command string            `json:"command"`
	Dir     string            `json:"dir,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	State   State             `json:"state"`
	PID     int               `json:"pid,omitempty"`
	PTY     bool              `json:"pty,omitempty"`
	Stdin   bool              `json:"stdin,omitempty"`
	// Limits are the ceilings the process runs under (StartOptions.Limits).
	Limits *env.Limits `json:"limits,omitempty"`
	// RunawayOptions are the process's own runaway thresholds
	// (StartOptions.Runaway); nil when it follows the registry's.
	RunawayOptions *RunawayOptions `json:"runaway_options,omitempty"`
	// Runaway: a runaway episode is on (a runaway event said what was
	// seen); false again once the condition clears.
	Runaway bool `json:"runaway,omitempty"`
	// WaitingInput: the running process waits for input, and how; nil
	// otherwise.
	WaitingInput *WaitingInput `json:"waiting_input,omitempty"`
	Detached     bool          `json:"detached,omitempty"`
	// Foreground: started by Run, whose caller waits for it; it ends when
	// that caller goes away (a daemon client's connection is its lease).
	Foreground bool      `json:"foreground,omitempty"`
	Notify     bool      `json:"notify,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	EndedAt    time.Time `json:"ended_at,omitzero"`
	// Status is how the process ended; nil while it runs and for lost or
	// failed processes.
	Status *env.ExitStatus `json:"status,omitempty"`
	// OutputBytes is the total number of output bytes received so far,
	// including bytes that no longer fit the buffer. Monotonic. For a
	// process that had finished before a restart it is the size the
	// state file recorded (its output is read back only when needed).
	OutputBytes int64 `json:"output_bytes"`
	// Reason explains a lost or failed state, or why the registry killed
	// the process on its own (a foreground process found running after a
	// restart, whose caller was lost; a process whose session's lease
	// dropped), or is ReasonOutOfMemory for a process that exited because
	// the kernel's OOM killer ended it.
	Reason string `json:"reason,omitempty"`
	// Session is the session the process lives under
	// (StartOptions.Session), "" when none.
	Session string `json:"session,omitempty"`
	// TimedOut is "", "timeout", "idle_timeout" or "ttl".
	TimedOut string `json:"timed_out,omitempty"`
	// Ref re-attaches to a detached process after a supervisor restart.
	// It is backend-private (state directories, container IDs) and of no
	// use to an agent, so only List with ListOptions.WithRef sets it.
	Ref *env.Ref `json:"ref,omitempty"`
	// WatchDisabled: the process's watch patterns matched too often and
	// were switched off.
	WatchDisabled bool `json:"watch_disabled,omitempty"`
	// Leftover counts the processes of the tree still running after the
	// leader exited (`cmd &`, a dev server that daemonises). While it is
	// above zero the process is not done: TreeRunning is set, Kill ends
	// them, Remove refuses and the process is never pruned.
	Leftover int `json:"leftover,omitempty"`
	// TreeRunning: some process of the tree runs: the leader, or what it
	// left running (Leftover > 0). Right after the leader's exit, before
	// the registry has looked at the tree (a moment; one Survivors call),
	// leftovers are not counted yet.
	TreeRunning bool `json:"tree_running,omitempty"`
	// ResultReported: a caller has received the final result (Wait, Poll,
	// Log or Run saw the end), so the exited event is no longer delivered
	// (Event.Consumed). A client of a remote registry filters its event
	// stream by it.
	ResultReported bool `json:"result_reported,omitempty"`

	// Name is the process's name (StartOptions.Name), "" when unnamed.
	Name string `json:"name,omitempty"`
	// Reused is set only on the Info Start returns: a live process of that
	// name with the same backend, command, directory and environment was
	// already running, and Start returned it instead of starting another.
	Reused bool `json:"reused,omitempty"`
	// Ready holds the readiness conditions (StartOptions.Ready), nil when
	// none were given.
	Ready *ReadyOptions `json:"ready,omitempty"`
	// ReadyAt is when every readiness condition first held; zero while
	// not (yet) ready.
	ReadyAt time.Time `json:"ready_at,omitzero"`
	// TTL and ExpiresAt: the tree is killed at ExpiresAt (StartedAt + TTL)
	// with a ttl_expired event. Zero when no TTL was given.
	TTL       Duration  `json:"ttl,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// IdleTimeout kills a background tree after that long without output.
	IdleTimeout Duration `json:"idle_timeout,omitempty"`
	// IdleExpiresAt is when IdleTimeout kills the tree if it writes
	// nothing before (the last output, or the start, + IdleTimeout); it
	// moves with every write. Zero without an idle timeout and once the
	// process ended.
	IdleExpiresAt time.Time `json:"idle_expires_at,omitzero"`
	// Ports lists the TCP ports the tree listens on, sorted; set by List
	// with ListOptions.Ports only (one look per backend, see ports.go).
	Ports []int `json:"ports,omitempty"`
	// PortsUnknown: with ListOptions.Ports, the backend did not tell this
	// process's ports in time, or is known not to answer (corral ps shows
	// "?"); Ports is empty then.
	PortsUnknown bool `json:"ports_unknown,omitempty"`
	// Stats is what the tree costs, from the registry's last sample of it
	// (stats.go): nil before the first sample and on a backend that cannot
	// measure its processes. Reading it never asks the backend.
	Stats *Stats `json:"stats,omitempty"`
	// BackendCondition is the condition of the process's backend while it
	// is not ok (paused, unreachable, gone: see env.Condition and
	// health.go), as the registry last saw it; empty while ok, and for a
	// process whose tree is known to have ended. Nothing asks the backend
	// to find it out.
	BackendCondition env.Condition `json:"backend_condition,omitempty"`
	// KillPending: a kill could not reach the backend (KillResult.
	// Unreachable); the registry runs it again once the backend answers,
	// and publishes a kill_finished event with the outcome. It survives a
	// restart (the state file keeps it).
	KillPending bool `json:"kill_pending,omitempty"`
}

// ReadyOptions are the conditions that make a process ready. Every
// condition given must hold; at least one must be given.
type ReadyOptions struct {
	// Port: a process of the tree listens on this TCP port (a program
	// outside the tree on the same port does not count).
	Port int `json:"port,omitempty"`
	// Pattern: a complete output line (ANSI-stripped) matches this regular
	// expression (Go syntax). Once matched it stays matched.
	Pattern string `json:"pattern,omitempty"`
	// URL: a GET of this http(s) URL, made from inside the sandbox,
	// answers 2xx or 3xx (redirects are not followed).
	URL string `json:"url,omitempty"`
}

// StartOptions describes a process to start.
type StartOptions struct {
	// Backend is the target passed to Config.Open; empty means
	// Config.DefaultBackend.
	Backend string
	// Command is the shell command line (run by the sandbox's /bin/sh -c).
	Command string
	Dir     string
	// Env holds extra variables (KEY=VALUE) on top of the base
	// environment; a named start compares it (see Name).
	Env []string
	// Environ is the caller's whole environment, the base of the command
	// on backends whose base is otherwise the supervisor's own (local;
	// see env.Spec.Environ); sandbox backends ignore it. Front ends send
	// it (filtered for credentials) so that a command started through the
	// daemon gets its caller's environment, not the daemon's. It is
	// passed to the backend and not kept: neither in Info, nor in the
	// state file, nor in what a named start compares.
	Environ []string
	// Session names the open session (OpenSession) the process lives
	// under: when the session ends, or its front end's lease drops, the
	// process's tree is killed. Empty: the process lives on whoever
	// started it. A session that is not open is refused
	// (ErrInvalidOptions).
	Session string
	// PTY, when non-nil, runs the command on a terminal of that size.
	PTY *env.WindowSize
	// Stdin keeps stdin open for Write, Submit and CloseStdin.
	Stdin bool
	// Limits, when non-nil, are hard ceilings on the process's tree
	// (memory, CPUs, tasks; see env.Limits). A backend that cannot
	// enforce one refuses the start (an error matching env.ErrUnsupported
	// that says why); nothing is started then.
	Limits *env.Limits
	// Runaway, when non-nil, are the thresholds past which the process
	// counts as runaway (a runaway event, Info.Runaway); nil takes
	// Config.Runaway. Judged from the stats sampler's figures, so a
	// backend that cannot measure its trees has no runaways.
	Runaway *RunawayOptions
	// Labels are caller-chosen key/value pairs for List and KillAll.
	Labels map[string]string
	// Watch lists substrings; WatchRegex regular expressions (Go syntax).
	// Each complete output line, ANSI-stripped, is matched against them
	// and a match publishes a watch_match event (rate-limited).
	Watch      []string
	WatchRegex []string
	// Notify marks the process's exited event as one the caller asked to
	// be told about (Event.Notify).
	Notify bool

	// Name names the process (see ValidateName). Names are unique among
	// processes whose tree still runs. Starting a name that is taken
	// returns the running process (Info.Reused) when it has the same
	// backend, command, directory and environment, and otherwise fails
	// with ErrNameInUse naming it, unless Replace is set.
	Name string
	// Replace kills the tree holding Name first (as Kill does), then
	// starts this one.
	Replace bool
	// Ready, when non-nil, makes the registry watch for readiness: it sets
	// Info.ReadyAt and publishes a ready event when every condition holds,
	// and a crashed event when the tree ends on its own after that.
	Ready *ReadyOptions
	// TTL kills the tree this long after it started (0: never), with a
	// ttl_expired event; Info.TimedOut is "ttl".
	TTL time.Duration
	// IdleTimeout kills the tree after this long without output (0:
	// never); Info.TimedOut is "idle_timeout".
	IdleTimeout time.Duration

	// Key, when set, makes Start idempotent: a Start with the Key of a
	// tracked process that did not fail returns that process
	// (Info.Reused), whatever its state, instead of starting another. A
	// caller that cannot tell whether its Start happened (the connection
	// to the supervisor broke before the answer; the supervisor
	// restarted) repeats it with the same Key: it gets the process that
	// started, or, when the supervisor died before it confirmed the start
	// (its successor then ended what it started, see StartRecover), a new
	// one. It matches [A-Za-z0-9_.-]{1,64} (ValidKey). Run ignores it.
	Key string
}

// ValidKey reports whether key is a valid StartOptions.Key.
func ValidKey(key string) bool { return key != "" && env.ValidTag(key) }

// RunOptions describes a foreground process: Run waits for it.
type RunOptions struct {
	StartOptions
	// Timeout kills the process tree after this long (0: none).
	Timeout time.Duration
	// IdleTimeout kills the process tree after this long without output
	// (0: none).
	IdleTimeout time.Duration
	// YieldAfter returns after this long with the process still running in
	// the background (0: never). Timeout and IdleTimeout stop applying
	// once Run has yielded.
	YieldAfter time.Duration
	// YieldOnInput returns as soon as the process waits for input
	// (Info.WaitingInput; a PTY or Stdin is needed for it to), with
	// Yielded set and the process still running, so that the caller can
	// answer (Submit, Write) instead of waiting for the timeout. As with
	// YieldAfter, the process is started as in the background.
	YieldOnInput bool
	// Grace is the time between SIGTERM and SIGKILL when a timeout fires
	// (0: Config.DefaultGrace).
	Grace time.Duration
	// Output, when non-nil, receives every output byte as it arrives,
	// until Run returns. A write error stops only the streaming.
	Output io.Writer
	// OnWaitingInput, when non-nil, is called each time the process is
	// marked waiting for input (see Info.WaitingInput), until Run returns:
	// a front end whose user cannot answer from where they are says so.
	OnWaitingInput func(WaitingInput) `json:"-"`
	// Started, when non-nil, is called once the process runs, before any
	// of its output reaches Output: the caller learns its ID (to feed
	// stdin, resize its terminal, or kill it) while Run still blocks.
	Started func(Info) `json:"-"`
}

// RunResult is the outcome of Run.
type RunResult struct {
	Info
	// Output is what the buffer holds: the head and the tail of the
	// output. When Truncated, OmittedBytes bytes starting at output offset
	// OmittedAt (= len of the head part) were dropped between them.
	Output       []byte `json:"output"`
	Truncated    bool   `json:"truncated,omitempty"`
	OmittedBytes int64  `json:"omitted_bytes,omitempty"`
	OmittedAt    int    `json:"omitted_at,omitempty"`
	// Yielded: YieldAfter elapsed first, or the process waits for input
	// (YieldOnInput; Info.WaitingInput says how); the process keeps
	// running in the background and Info.ID names it.
	Yielded bool `json:"yielded,omitempty"`
	// Kill is how the tree was ended when a timeout fired or the context
	// was cancelled; nil otherwise.
	Kill *KillResult `json:"kill,omitempty"`
}

// PollResult is a process's state and its output since a byte cursor.
type PollResult struct {
	Info
	// Output holds the bytes from the cursor on that the buffer still has.
	// When OmittedBytes > 0, that many bytes are missing at Output offset
	// OmittedAt: either 0 (the cursor fell out of the buffer) or the end
	// of the head part.
	Output       []byte `json:"output"`
	OmittedBytes int64  `json:"omitted_bytes,omitempty"`
	OmittedAt    int    `json:"omitted_at,omitempty"`
	// Next is the cursor for the following Poll: the total output bytes
	// seen when this snapshot was taken.
	Next int64 `json:"next"`
}

// LogOptions selects lines of a process's held output.
type LogOptions struct {
	// Offset is the 1-based number of the first line to return; 0 returns
	// the last Limit lines.
	Offset int
	// Limit is the maximum number of lines (0: 200).
	Limit int
	// Strip removes ANSI/OSC escape sequences and control characters
	// other than tab.
	Strip bool
}

// DefaultLogLines is the number of lines Log returns when Limit is 0.
const DefaultLogLines = 200

// LogResult is a window of lines of the held output.
type LogResult struct {
	ID    string `json:"id"`
	State State  `json:"state"`
	// Lines are the selected lines without their newline. When output was
	// omitted from the middle, one line "[… N bytes omitted …]" stands for
	// it (counted in TotalLines).
	Lines []string `json:"lines"`
	// Offset is the 1-based line number of Lines[0].
	Offset       int   `json:"offset"`
	TotalLines   int   `json:"total_lines"`
	OmittedBytes int64 `json:"omitted_bytes,omitempty"`
	OutputBytes  int64 `json:"output_bytes"`
}

// KillOptions chooses how Kill ends a process tree. The zero value is
// the default kill: TERM, the grace period, SIGKILL to what is left.
//
// Two words, one idea each, the same in every front end (the CLI's
// flags, the API's and MCP's arguments): Force is SIGKILL now, Escalate
// is SIGKILL after the grace. Kill checks the options (Check), so a front
// end only translates its own words into these.
type KillOptions struct {
	// Signal is the first signal (default TERM).
	Signal env.Signal
	// Grace is the wait before SIGKILL (default Config.DefaultGrace). It
	// must not be negative.
	Grace time.Duration
	// Force sends SIGKILL at once, as the first signal. It cannot be
	// combined with a Signal other than KILL, nor with Escalate false.
	Force bool
	// Escalate says whether SIGKILL follows when the grace passes with
	// part of the tree alive. nil, the zero value, means true: the
	// default kill escalates, and a pointer lets the name say what it
	// does with the same polarity as the wire's "escalate" (a bool named
	// for the exception would read the other way round). false signals
	// the tree and waits up to the grace for it to end, but never sends
	// SIGKILL: a HUP that reloads a server, an INT that may take longer
	// than the grace. KillResult.StillRunning says whether the tree
	// outlived the grace.
	Escalate *bool
}

// KillResult reports how a kill went.
type KillResult struct {
	ID string `json:"id"`
	// Signal is the first signal sent ("" when the process had already
	// exited).
	Signal env.Signal `json:"signal,omitempty"`
	// Escalated: SIGKILL was sent to some process of the tree after the
	// first signal (which was not KILL) left it running past the grace
	// period — even when the leader itself had died of the first signal.
	Escalated bool `json:"escalated,omitempty"`
	// Ended counts the processes of the tree that were alive when the
	// kill began and are gone when it returns: the leader and whatever
	// it left running.
	Ended int `json:"ended"`
	// StillRunning: with Escalate false, some of the tree outlived the grace
	// period and was left running.
	StillRunning bool `json:"still_running,omitempty"`
	// AlreadyExited: the leader had finished before this Kill signalled
	// it (on its own, or through a concurrent Kill); Status is its real
	// status. What it left running is still signalled (Ended counts it).
	AlreadyExited bool            `json:"already_exited,omitempty"`
	Status        *env.ExitStatus `json:"status,omitempty"`
	// Survivors lists PIDs of the tree still alive after the kill was
	// verified; it should be empty.
	Survivors []int `json:"survivors,omitempty"`
	State     State `json:"state"`
	// Unreachable: the backend did not answer (a paused container, a host
	// that is down or silent), so the tree was not killed, or the kill
	// could not be verified: the process is never reported killed then.
	// The kill stays pending (Info.KillPending): the registry runs it
	// again once the backend answers, and publishes a kill_finished event
	// with the outcome. Detail says why, in one sentence.
	Unreachable bool   `json:"unreachable,omitempty"`
	Detail      string `json:"detail,omitempty"`
}

// ListOptions filters List. All filters must hold.
type ListOptions struct {
	// States selects these states; empty means starting and running, or
	// every state when All is set.
	States []State
	// Labels selects processes carrying all these labels.
	Labels map[string]string
	// Backend selects one target.
	Backend string
	// All includes finished processes.
	All bool
	// WithRef sets Info.Ref of detached processes.
	WithRef bool
	// Ports sets Info.Ports of processes whose tree runs, on backends that
	// can see sockets (one look per process).
	Ports bool
}

// PortInfo is one listening TCP socket of a backend (Service.Ports).
type PortInfo struct {
	Backend string `json:"backend"`
	env.Listener
	// ID and Name name the corral process whose tree holds the socket;
	// empty when corral did not start its holder.
	ID   string `json:"id,omitempty"`
	Name string `json:"name,omitempty"`
}

// KillAllOptions chooses which processes KillAll ends and how.
type KillAllOptions struct {
	// Labels selects processes carrying all these labels; empty selects
	// every process. Selected are those running and those whose leader
	// exited with part of its tree still running.
	Labels map[string]string
	// Signal, Grace, Force and Escalate are KillOptions', for each kill.
	Signal   env.Signal
	Grace    time.Duration
	Force    bool
	Escalate *bool
}

// ReasonOutOfMemory is Info.Reason of a process that exited because the
// kernel's OOM killer ended it (env.ExitStatus.OOMKilled); an oom_killed
// event says so too. One phrase for it everywhere: env.OutOfMemory.
const ReasonOutOfMemory = env.OutOfMemory

// outOfMemoryReason is ReasonOutOfMemory, with the memory limit the
// process ran under when it had one: "out of memory (limit 2G)"; without
// one of its own, its sandbox's: "out of memory (sandbox limit 512M)".
func outOfMemoryReason(l, sandbox *env.Limits) string {
	switch {
	case l != nil && l.Memory != 0:
		return ReasonOutOfMemory + " (limit " + env.FormatSize(l.Memory) + ")"
	case sandbox != nil && sandbox.Memory != 0:
		return ReasonOutOfMemory + " (sandbox limit " + env.FormatSize(sandbox.Memory) + ")"
	}
	return ReasonOutOfMemory
}

// IsOutOfMemory reports whether an Info.Reason says the OOM killer ended
// the process, whatever limit it names.
func IsOutOfMemory(reason string) bool {
	return reason == ReasonOutOfMemory || strings.HasPrefix(reason, ReasonOutOfMemory+" (")
}

// StateText is the state as people read it (corral ps, the dashboard):
// "running", "exited (0)", "killed (SIGTERM)", "exited (SIGKILL, out of
// memory)", "exited (0), 1 left running", and "running (foreground)" for
// a Run someone waits on; with the backend's condition while it is not ok
// ("running (docker://web paused)") and a kill that is pending (", kill
// pending").
func (in Info) StateText() string {
	state := string(in.State)
	if in.Foreground && !in.State.Final() {
		state += " (foreground)"
	}
	if in.Status != nil && in.State.Final() {
		how := fmt.Sprint(in.Status.Code)
		if in.Status.Signal != "" {
			how = in.Status.Signal.String()
		}
		if in.Status.OOMKilled {
			how += ", " + ReasonOutOfMemory
		}
		state += " (" + how + ")"
	}
	if in.State.Final() && in.Leftover > 0 {
		state += fmt.Sprintf(", %d left running", in.Leftover)
	}
	if in.BackendCondition != "" && in.BackendCondition != env.ConditionOK {
		state += " (" + in.Backend + " " + string(in.BackendCondition) + ")"
	}
	if in.KillPending {
		state += ", kill pending"
	}
	if in.WaitingInput != nil && in.State == StateRunning {
		state += ", waiting for input (" + in.WaitingInput.Kind + ")"
	}
	return state
}
