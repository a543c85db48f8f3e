package ssh

import (
	"context"
	"fmt"

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
		Name: tr.Name(),
		LimitsNote: "per-process limits on an SSH host (systemd-run --user --scope, or a delegated cgroup) are not implemented yet; " +
			"run the command under the host's own limits (ulimit, systemd-run) instead",
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
	return e, nil
}
