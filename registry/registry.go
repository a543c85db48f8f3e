package registry

import (
	"context"
	"errors"
	"time"
)

var errTODO = errors.New("registry: not implemented yet")

// Registry tracks processes across environments. Construct it with New;
// it is safe for concurrent use.
type Registry struct{}

// New returns a Registry for cfg; Close it when done.
func New(cfg Config) (*Registry, error) { return &Registry{}, nil }

// Close stops the registry's goroutines and closes every environment it
// opened, which kills the processes not started detached.
func (r *Registry) Close() error { return nil }

// Start starts a background process.
func (r *Registry) Start(ctx context.Context, opts StartOptions) (Info, error) { return Info{}, errTODO }

// Run runs a foreground process.
func (r *Registry) Run(ctx context.Context, opts RunOptions) (RunResult, error) {
	return RunResult{}, errTODO
}

// Get returns a snapshot of the process idOrPrefix names.
func (r *Registry) Get(idOrPrefix string) (Info, error) { return Info{}, errTODO }

// Resolve returns the full ID a full ID or unique prefix names.
func (r *Registry) Resolve(idOrPrefix string) (string, error) { return "", errTODO }

// Poll returns the state and the output since byte cursor since.
func (r *Registry) Poll(ctx context.Context, id string, since int64) (PollResult, error) {
	return PollResult{}, errTODO
}

// Log returns lines of the held output.
func (r *Registry) Log(ctx context.Context, id string, opts LogOptions) (LogResult, error) {
	return LogResult{}, errTODO
}

// Wait waits for the process to finish.
func (r *Registry) Wait(ctx context.Context, id string, timeout time.Duration) (Info, error) {
	return Info{}, errTODO
}

// Kill ends the process tree.
func (r *Registry) Kill(ctx context.Context, id string, opts KillOptions) (KillResult, error) {
	return KillResult{}, errTODO
}

// Write writes data to the process's stdin.
func (r *Registry) Write(ctx context.Context, id string, data []byte) error { return errTODO }

// Submit writes line and a line terminator to stdin.
func (r *Registry) Submit(ctx context.Context, id, line string) error { return errTODO }

// CloseStdin closes the process's stdin.
func (r *Registry) CloseStdin(ctx context.Context, id string) error { return errTODO }

// List returns snapshots of the processes opts selects.
func (r *Registry) List(opts ListOptions) []Info { return nil }

// KillAll kills every running process opts selects.
func (r *Registry) KillAll(ctx context.Context, opts KillAllOptions) ([]KillResult, error) {
	return nil, errTODO
}

// Remove forgets a finished process and deletes its state in the sandbox.
func (r *Registry) Remove(ctx context.Context, id string) error { return errTODO }

// Subscribe returns a subscription to the event stream.
func (r *Registry) Subscribe() *Subscription { return newSubscription(r, DefaultSubscriptionBuffer) }

func (r *Registry) finalSeen(id string) bool { return false }
func (r *Registry) unsubscribe(s *Subscription) {}
