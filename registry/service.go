package registry

import (
	"context"
	"time"

	"github.com/corralhq/corral/env"
)

// Service is what a front end (the corral command, the MCP server) asks of
// a process registry. *Registry implements it in process; daemon.Client
// implements it over the daemon's socket, so that every front end can work
// against the one registry the daemon holds and fall back to a private one
// with the same code. registrytest holds the suite both pass.
//
// Errors carry the registry's classes (errors.Is(err, ErrNotFound), …)
// whichever side produced them.
type Service interface {
	// Start starts a background process.
	Start(ctx context.Context, opts StartOptions) (Info, error)
	// Run runs a foreground process and returns its result; see
	// Registry.Run. Cancelling ctx kills the tree before Run returns.
	Run(ctx context.Context, opts RunOptions) (RunResult, error)

	Get(ctx context.Context, idOrPrefix string) (Info, error)
	List(ctx context.Context, opts ListOptions) ([]Info, error)
	Poll(ctx context.Context, id string, since int64) (PollResult, error)
	Log(ctx context.Context, id string, opts LogOptions) (LogResult, error)
	Wait(ctx context.Context, id string, timeout time.Duration) (Info, error)
	WaitTree(ctx context.Context, id string, timeout time.Duration) (Info, error)
	// WaitReady waits until the process is ready (StartOptions.Ready) and
	// returns its Info with ReadyAt set; when its tree ends first, the
	// final Info with ReadyAt zero and no error. ErrWaitTimeout when
	// timeout (0: none) elapses first; ErrInvalidOptions when it has no
	// readiness conditions.
	WaitReady(ctx context.Context, id string, timeout time.Duration) (Info, error)

	// Ports lists every listening TCP socket of backend ("" = the default
	// backend), with the corral process whose tree holds it when corral
	// started its holder. An error matching env.ErrUnsupported when the
	// backend cannot see sockets.
	Ports(ctx context.Context, backend string) ([]PortInfo, error)

	// Stats returns what the process's tree costs now and its samples of
	// the last ten minutes, as the registry last sampled them (it never
	// asks the backend); see Registry.Stats.
	Stats(ctx context.Context, id string) (StatsReport, error)

	Kill(ctx context.Context, id string, opts KillOptions) (KillResult, error)
	KillAll(ctx context.Context, opts KillAllOptions) ([]KillResult, error)
	// KillPort kills the corral trees that listen on a TCP port of
	// backend ("" = the default backend) and reports the programs corral
	// did not start that hold it, without touching them; see
	// Registry.KillPort.
	KillPort(ctx context.Context, backend string, port int, opts KillOptions) (PortKillResult, error)
	Remove(ctx context.Context, id string) error
	RemoveForce(ctx context.Context, id string) error

	Write(ctx context.Context, id string, data []byte) error
	Submit(ctx context.Context, id, line string) error
	CloseStdin(ctx context.Context, id string) error
	Resize(ctx context.Context, id string, size env.WindowSize) error

	// Events subscribes to the events published from now on. Close the
	// stream when done.
	Events(ctx context.Context) (EventStream, error)

	// OpenSession opens a front end's session (see session.go): the
	// processes started with StartOptions.Session naming it are killed
	// when it ends, or when its lease drops (the front end vanished).
	OpenSession(ctx context.Context, opts SessionOptions) (SessionLease, error)
}

// EventStream is a subscription to a Service's events.
type EventStream interface {
	// Next blocks until an event or ctx is done; after Close, and when
	// the service closes, it fails with ErrClosed.
	Next(ctx context.Context) (Event, error)
	Close()
}

var _ Service = (*Registry)(nil)

// Events is Subscribe as a Service: it never fails in process.
func (r *Registry) Events(context.Context) (EventStream, error) { return r.Subscribe(), nil }
