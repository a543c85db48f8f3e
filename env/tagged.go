package env

import "context"

// TagFinder is implemented by an Environment that can find the processes
// it started by their Spec.Tag, without a Ref: the processes of a
// supervisor that died while Start ran, before it held a Ref to record.
// The registry tags every process with its ID and, after a restart, asks
// for the IDs whose start was never confirmed, to end what they left
// running (see registry's Recover).
//
// Only processes started with Spec.Detach (every process, on a sandbox
// backend) can be found: the others lived and died with their supervisor.
type TagFinder interface {
	// Tagged returns a handle on every process of this sandbox that was
	// started with one of tags as its Spec.Tag, keyed by tag; a tag no
	// process has is absent. A handle behaves as one from Attach (Signal,
	// Survivors, Wait, Remove, Release); the process may have ended.
	// Empty tags and tags Spec.Validate would refuse match nothing. A
	// start still under way inside the sandbox (its supervisor died
	// mid-call) is waited for briefly; one that makes no progress is not
	// returned.
	Tagged(ctx context.Context, tags []string) (map[string][]Process, error)
}
