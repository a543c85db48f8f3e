package ssh

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
)

// Open returns the Environment for the host that target names
// (ssh://[user@]host[:port]; see Dial for how it is resolved and the
// errors it reports). Processes run on the host through the env/nohup
// engine over one shared connection; Close of the Environment handles its
// processes as nohup documents and then closes the connection.
func Open(ctx context.Context, target string, opts Options) (env.Environment, error) {
	tr, err := Dial(ctx, target, opts)
	if err != nil {
		return nil, err
	}
	residents := opts.Residents
	if residents == 0 {
		residents = tr.MaxShells()
	}
	e, err := nohup.New(tr, nohup.Options{
		Name:      tr.Name(),
		BaseDir:   opts.BaseDir,
		Residents: residents,
		LogMax:    opts.LogMax,
		Logger:    opts.Logger,
		OnClose:   tr.Close,
	})
	if err != nil {
		tr.Close()
		return nil, fmt.Errorf("ssh: %s: %w", tr.Name(), err)
	}
	// Whether --memory, --cpus and --pids can be enforced on the host is
	// known from here on (Capabilities.Limits). A host that does not
	// answer now is not refused for it: its limits stay refused, and say
	// why.
	if err := e.ProbeLimits(ctx); err != nil {
		log := opts.Logger
		if log == nil {
			log = slog.Default()
		}
		log.Warn("ssh: cannot tell whether the host takes per-process limits; they are refused", "target", tr.Name(), "err", err)
	}
	return e, nil
}
