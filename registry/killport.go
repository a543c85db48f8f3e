package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/corralhq/corral/env"
)

// PortKillResult is what KillPort did.
type PortKillResult struct {
	Port int `json:"port"`
	// Killed holds a kill for each corral process whose tree listened on
	// Port, in the order of the sockets; empty when none did.
	Killed []KillResult `json:"killed"`
	// Foreign lists the sockets on Port that programs corral did not
	// start hold (with their PID and command when the backend can see
	// them). KillPort never touches them: they are for the caller to
	// report. The same port can be held by a corral tree on one address
	// and by another program on another.
	Foreign []PortInfo `json:"foreign,omitempty"`
}

// KillPort kills, with opts, the tree of each corral process that listens
// on TCP port in backend ("" for Config.DefaultBackend), found by Ports,
// and reports the sockets on that port that programs corral did not start
// hold, which it leaves alone. Nothing listening on the port is no error:
// the result is empty. Neither is a kill whose backend did not answer:
// its result is Unreachable and the kill stays pending, as Kill reports
// it, which the result says in full.
//
// ErrInvalidOptions for a port out of range or options Kill would refuse
// (checked before anything is looked at); Ports' errors (a backend that
// cannot see sockets: env.ErrUnsupported); and the other failed kills,
// joined, each naming its process, with the results of the kills that
// reached a process.
func (r *Registry) KillPort(ctx context.Context, backend string, port int, opts KillOptions) (PortKillResult, error) {
	res := PortKillResult{Port: port, Killed: []KillResult{}}
	if err := env.ValidatePort(port); err != nil {
		return res, fmt.Errorf("%w: port %d: %w", ErrInvalidOptions, port, err)
	}
	if _, err := r.planKill(opts); err != nil {
		return res, err
	}
	list, err := r.Ports(ctx, backend)
	if err != nil {
		return res, err
	}
	var owners []string
	for _, p := range list {
		switch {
		case p.Port != port:
		case p.ID == "":
			res.Foreign = append(res.Foreign, p)
		case !slices.Contains(owners, p.ID):
			owners = append(owners, p.ID)
		}
	}
	var errs []error
	for _, id := range owners {
		kr, err := r.Kill(ctx, id, opts)
		if err != nil && !kr.Unreachable {
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
		}
		if err != nil && kr.ID == "" {
			continue
		}
		res.Killed = append(res.Killed, kr)
	}
	return res, errors.Join(errs...)
}
