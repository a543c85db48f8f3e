package env

import (
	"context"
	"time"
)

// Condition is what a health check found of a backend: whether its
// sandbox answers, and if not, why. The registry shows it beside the state
// of every process on that backend ("running (docker://web paused)").
type Condition string

// Backend conditions.
const (
	// ConditionOK: the sandbox answers.
	ConditionOK Condition = "ok"
	// ConditionPaused: the sandbox exists but none of its processes runs
	// (`docker pause`); calls into it hang until it is resumed.
	ConditionPaused Condition = "paused"
	// ConditionUnreachable: the sandbox cannot be reached right now (the
	// Docker Engine, the SSH host or the plugin does not answer, or the
	// connection is down and being re-established). Its processes may
	// still run.
	ConditionUnreachable Condition = "unreachable"
	// ConditionGone: the sandbox itself is gone (container removed or
	// stopped); its processes are lost.
	ConditionGone Condition = "gone"
)

// Health is the answer of a health check.
type Health struct {
	Condition Condition `json:"condition"`
	// Detail says why, in a short sentence that names the fix where there
	// is one ("container web is paused: docker unpause web"); empty when
	// the condition is ok.
	Detail string `json:"detail,omitempty"`
}

// HealthChecker is implemented by an Environment (or a nohup transport)
// that can tell, cheaply and without running anything inside the sandbox
// where it can, whether its sandbox answers: docker asks the engine about
// the container, ssh sends a keepalive on its connection, a plugin asks
// its plugin. A supervisor calls it in the background with a short
// deadline, never while a caller waits.
//
// Health returns within ctx's deadline. A check that cannot finish in
// time reports ConditionUnreachable: not answering a health check in time
// is what unreachable means to a caller.
type HealthChecker interface {
	Health(ctx context.Context) Health
}

// HealthTimeout is the deadline a supervisor gives one health check; an
// implementation that makes a network round trip should not need more.
const HealthTimeout = 2 * time.Second
