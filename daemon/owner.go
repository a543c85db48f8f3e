package daemon

import (
	"context"
	"log/slog"
	"runtime"
	"time"

	"github.com/corralhq/corral/internal/procstat"
	"github.com/corralhq/corral/registry"
)

// OwnerEnv names the variable that ties a daemon to the process it lives
// for: a PID, which `corral serve` (and so an auto-started daemon, which
// inherits it from the command that started it) watches. A test harness
// or an agent runtime that must leave nothing behind sets it to its own
// PID: when it ends, even by SIGKILL or a test binary's timeout, the
// daemon kills every process tree and stops, as shutdown --kill-all does.
const OwnerEnv = "CORRAL_OWNER_PID"

// ownerEvery is how often the owner is looked at: one read of its
// /proc/PID/stat.
const ownerEvery = 500 * time.Millisecond

// watchOwner calls gone once the process pid (recorded with its start
// time, so that a reused PID is not taken for it) has ended, or at once
// when it has already, and returns when ctx is done. Owners are watched
// on Linux only (/proc); elsewhere it logs that and returns.
func watchOwner(ctx context.Context, pid int, log *slog.Logger, gone func()) {
	if runtime.GOOS != "linux" {
		log.Warn("the owner process is not watched: that needs Linux's /proc", "owner", pid)
		return
	}
	id, err := procstat.Identify(pid)
	if err != nil {
		log.Warn("the owner process has already ended; stopping", "owner", pid, "err", err)
		gone()
		return
	}
	t := time.NewTicker(ownerEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !id.Alive() {
			log.Warn("the owner process ended; killing every process tree and stopping", "owner", pid)
			gone()
			return
		}
	}
}

// killForOwner is what a daemon whose owner ended does before it stops:
// the kill of shutdown --kill-all, bounded.
func killForOwner(reg *registry.Registry, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := reg.KillAll(ctx, registry.KillAllOptions{})
	if err != nil {
		log.Warn("killing every process tree for the owner's end", "err", err, "results", len(res))
	}
}
