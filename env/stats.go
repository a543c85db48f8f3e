package env

import (
	"context"
	"time"
)

// TreeStats is what a process tree costs at one moment: its live members
// summed. CPU is cumulative, so a rate needs two samples (the registry
// keeps them); RSS is resident memory now. A field the backend cannot read
// is zero and named in Missing, never guessed.
type TreeStats struct {
	// CPU is the CPU time, user plus system, of the tree's live members
	// and of the children they have reaped.
	CPU time.Duration `json:"cpu"`
	// RSS is the resident memory of the tree's live members, in bytes.
	RSS int64 `json:"rss_bytes"`
	// Pids is how many processes of the tree are alive, zombies excluded.
	Pids int `json:"pids"`
	// ReadBytes and WriteBytes are the bytes the tree's live members made
	// the kernel read from and write to storage (/proc/PID/io's
	// read_bytes and write_bytes), where the backend may read them.
	ReadBytes  int64 `json:"read_bytes,omitempty"`
	WriteBytes int64 `json:"write_bytes,omitempty"`
	// Missing names the fields above that could not be read ("io" when
	// /proc/PID/io is not readable), so a zero there is not taken for a
	// measurement.
	Missing []string `json:"missing,omitempty"`
}

// TreeStatter is implemented by an Environment that can measure many of
// its processes' trees in one look: one pass over /proc on the machine,
// one round trip into a sandbox. The tree is what Process.Survivors would
// return (the leader while it runs, and what it left running).
//
// TreeStats returns, for each of procs in order, that tree's figures. A
// process that is not one of this Environment's (another backend's
// handle, one released) or whose tree is gone gets nil and no error. An
// error means no result for any of them.
type TreeStatter interface {
	TreeStats(ctx context.Context, procs []Process) ([]*TreeStats, error)
}
