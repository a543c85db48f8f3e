package nohup

import (
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/backoff"
)

// PollConfig tunes the client-side pacing of the polls of Wait and Output
// that are not long polls (Options.LongPoll < 0, or MaxLongPolls in
// flight): the interval starts at Min after start, a signal or new output,
// and grows by Factor per idle poll up to Max.
type PollConfig struct {
	Min    time.Duration // default 10ms
	Max    time.Duration // default 500ms
	Factor float64       // default 2
}

// Options configures an Env. The zero value works.
type Options struct {
	// Name is Environment.Name(), for example "docker://web". Default "nohup".
	Name string
	// LimitsNote is Capabilities.LimitsNote: the engine enforces no
	// env.Limits inside the sandbox (it refuses them), and this says what
	// to do instead on this transport. Default: a general sentence.
	LimitsNote string
	// SandboxLimits is Capabilities.SandboxLimits: the limits of the
	// sandbox as a whole, when the transport knows them.
	SandboxLimits *env.Limits
	// BaseDir holds one private directory per process inside the sandbox.
	// Default /tmp/.corral-UID, UID being the sandbox user's (`id -u`, asked
	// once). It must be an absolute path of [A-Za-z0-9._/-].
	BaseDir string
	// Shell runs the wrapper scripts and the command (as Shell -c Command).
	// Default /bin/sh. Absolute path of [A-Za-z0-9._/-].
	Shell string
	// Poll paces the polls that are not long polls.
	Poll PollConfig
	// Retention is how long the directory of a finished process is kept
	// (counted from its exit). Start sweeps older ones, at most once an
	// hour per Env. Default 24h; negative keeps them forever.
	Retention time.Duration
	// ChunkSize bounds the log bytes one poll transfers. Default 1 MiB.
	ChunkSize int64
	// StartWait is how long Start waits inside the sandbox, in the same
	// round trip, for the command to end. A command that ends within it
	// costs one round trip in all: Start brings back its exit status and
	// its first ChunkSize bytes of output, which Wait and the first Output
	// use without asking the sandbox again. Default 50ms; negative: Start
	// returns as soon as the command runs.
	StartWait time.Duration
	// LongPoll is how long one poll of Wait or Output waits inside the
	// sandbox for the command to end or (Output) for new output, checking
	// in steps of 5ms growing to 50ms. An idle process then costs one round
	// trip per LongPoll per reader, and an exit is seen within one step
	// instead of one client-side interval (Poll). Default 1s; negative
	// disables long polls and follows: each poll looks once and Poll paces
	// them. Output and Wait prefer a follow to long polls: one call that
	// streams the output and reports the exit as they happen.
	LongPoll time.Duration
	// FollowIdle is how long a follow (see Output and Wait) waits without
	// output before it ends and the reader opens another, so that an idle
	// follower hands its transport session back now and then. Default 30s.
	FollowIdle time.Duration
	// MaxLongPolls bounds the long polls and follows in flight at once per
	// Env, since each holds a transport session (an ssh connection allows
	// 10): when all are taken, polls look once and Poll paces them.
	// Default 4.
	MaxLongPolls int
	// Residents bounds the resident shells kept for a ShellTransport (see
	// there). Default 4; negative: none, every call is an Exec.
	Residents int
	// LogMax bounds a process's log inside the sandbox (see env.LogKeep):
	// a follow drops the middle of the log behind what it sent, with
	// util-linux `fallocate -p` where the sandbox has it (busybox's
	// fallocate cannot punch holes: there the whole log is kept). 0 means
	// env.DefaultLogMax, a negative value no bound.
	LogMax int64
	// Logger receives debug and warning messages. Default slog.Default().
	Logger *slog.Logger
	// OnClose, when set, is run by Close after the processes were handled,
	// for the backend's own cleanup (remove a sandbox container).
	OnClose func() error
}

func (o Options) withDefaults() Options {
	if o.Name == "" {
		o.Name = "nohup"
	}
	if o.Shell == "" {
		o.Shell = "/bin/sh"
	}
	if o.Poll.Min <= 0 {
		o.Poll.Min = 10 * time.Millisecond
	}
	if o.Poll.Max <= 0 {
		o.Poll.Max = 500 * time.Millisecond
	}
	if o.Poll.Max < o.Poll.Min {
		o.Poll.Max = o.Poll.Min
	}
	if o.Poll.Factor <= 1 {
		o.Poll.Factor = 2
	}
	if o.Retention == 0 {
		o.Retention = 24 * time.Hour
	}
	if o.Residents == 0 {
		o.Residents = 4
	}
	if o.ChunkSize <= 0 {
		o.ChunkSize = 1 << 20
	}
	if o.StartWait == 0 {
		o.StartWait = 50 * time.Millisecond
	}
	if o.LongPoll == 0 {
		o.LongPoll = time.Second
	}
	if o.FollowIdle <= 0 {
		o.FollowIdle = 30 * time.Second
	}
	if o.MaxLongPolls <= 0 {
		o.MaxLongPolls = 4
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// newBackoff returns the adaptive poll interval cfg describes; a reset
// makes the next poll fast again (new output, a signal).
func newBackoff(cfg PollConfig) *backoff.Backoff {
	return &backoff.Backoff{Min: cfg.Min, Max: cfg.Max, Factor: cfg.Factor}
}

// sleepSteps returns the sleeps, in seconds for sleep(1), that a script
// waiting inside the sandbox takes between its checks: first, growing by
// half per step up to most, adding up to at most total. Empty when total
// is not positive: the script checks once.
func sleepSteps(total, first, most time.Duration) string {
	var b strings.Builder
	for step, sum := first, time.Duration(0); total > 0 && sum+step <= total; step = min(step*3/2, most) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatFloat(step.Seconds(), 'f', 3, 64))
		sum += step
	}
	return b.String()
}
