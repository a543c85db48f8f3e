package registry

import (
	"fmt"

	"github.com/corralhq/corral/env"
)

// Escalates reports whether the kill sends SIGKILL to what survives the
// grace: Escalate unset (the default) or true.
func (o KillOptions) Escalates() bool { return o.Escalate == nil || *o.Escalate }

// killOptions are the options of each kill of a KillAll.
func (o KillAllOptions) killOptions() KillOptions {
	return KillOptions{Signal: o.Signal, Grace: o.Grace, Force: o.Force, Escalate: o.Escalate}
}

// planKill is the one check of a kill's options, made by Kill and KillAll
// whichever front end asked (the CLI, the API, MCP, ACP, the dashboard
// only translate their words into KillOptions), and the plan the kill
// runs. Its errors match ErrInvalidOptions.
func (r *Registry) planKill(opts KillOptions) (killPlan, error) {
	sig, grace, err := r.killParams(opts.Signal, opts.Grace)
	if err != nil {
		return killPlan{}, err
	}
	escalate := opts.Escalates()
	if opts.Force {
		if !escalate {
			return killPlan{}, fmt.Errorf("%w: force and escalate=false contradict each other: force sends SIGKILL at once, escalate=false never sends it", ErrInvalidOptions)
		}
		sig = env.SIGKILL
	}
	return killPlan{sig: sig, grace: grace, escalate: escalate, reason: StateKilled}, nil
}
