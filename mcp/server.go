package mcp

//lint:file-ignore SA1019 MCP logging notifications are deprecated only from protocol 2026-07-28, which this server does not offer (see doc.go); they are how events reach session-based clients.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/registry"
)

// LoggerName is the "logger" field of corral's MCP log notifications.
const LoggerName = "corral"

// Config configures a Server.
type Config struct {
	// Registry runs the processes: the daemon's (daemon.Client) or one in
	// process. Required. The Server does not close it.
	Registry registry.Service
	// Backend is the target processes run on ("" = the registry's
	// default).
	Backend string
	// Dir is the working directory of a call that names no workdir (and
	// what a relative one is relative to). Environ is the environment
	// commands start from, beneath the agent defaults and the call's env
	// (registry.StartOptions.Environ). A server whose registry is the
	// daemon's passes its own directory and environment on the local
	// backend: the daemon's are nobody's.
	Dir     string
	Environ []string
	// MaxOutput caps the output bytes of one tool result (default
	// DefaultMaxOutput).
	MaxOutput int
	// Version is reported to clients as the server's version.
	Version string
	// Logger receives diagnostics; default slog.Default().
	Logger *slog.Logger
}

// Server is corral's MCP server: the terminal and process tools over one
// registry, for any number of client sessions. Build it with New, connect
// clients with Run (one transport) or HTTPHandler, and Close it when done.
type Server struct {
	cfg Config
	reg registry.Service
	mcp *sdk.Server
	log *slog.Logger

	ctx    context.Context // cancelled by Close; ends the notification pumps
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	sessions map[*sdk.ServerSession]*session
}

// session is the per-client state: its lease, event subscriptions and
// poll cursors.
type session struct {
	ss     *sdk.ServerSession
	lease  registry.SessionLease // its processes live under it, but persisted ones
	id     string                // the lease's ID, also the SessionLabel of its processes
	events registry.EventStream  // drained by process action "events"
	notes  registry.EventStream  // drained by the notification pump

	mu      sync.Mutex
	cursors map[string]int64 // process ID → output byte already handed out
}

func (s *session) cursor(id string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cursors[id]
}

func (s *session) setCursor(id string, next int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cursors[id] = max(s.cursors[id], next)
}

// New returns a Server over cfg.Registry with its tools registered.
func New(cfg Config) (*Server, error) {
	if cfg.Registry == nil {
		return nil, errors.New("mcp: Config.Registry is required")
	}
	if cfg.MaxOutput <= 0 {
		cfg.MaxOutput = DefaultMaxOutput
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:      cfg,
		reg:      cfg.Registry,
		log:      cfg.Logger.With("component", "mcp"),
		ctx:      ctx,
		cancel:   cancel,
		sessions: make(map[*sdk.ServerSession]*session),
	}
	var versions []string
	for _, v := range sdk.SupportedProtocolVersions() {
		// Session-based versions only; see the package documentation.
		if v < "2026-07-28" {
			versions = append(versions, v)
		}
	}
	s.mcp = sdk.NewServer(&sdk.Implementation{Name: "corral", Title: "corral process supervisor", Version: cfg.Version},
		&sdk.ServerOptions{
			Instructions: instructions,
			Logger:       s.log,
			InitializedHandler: func(_ context.Context, req *sdk.InitializedRequest) {
				s.session(req.Session)
			},
			Capabilities:              &sdk.ServerCapabilities{Logging: &sdk.LoggingCapabilities{}},
			SupportedProtocolVersions: versions,
		})
	if err := s.addTools(); err != nil {
		cancel()
		return nil, err
	}
	return s, nil
}

const instructions = `corral runs shell commands for you and supervises their whole process trees.
Use "terminal" to run a command: in the foreground for things that finish (builds, tests, git), with
background=true for servers and watchers. Use "process" to list, poll, read logs of, wait for, kill,
and write stdin to processes by their id. Output is stripped of terminal escapes and capped; use
process log/poll with offsets for more. Timeouts kill the whole process tree.
For a dev server, start it with background=true, a name, ready_port (or ready_pattern, ready_url) and
a ttl, then call process action=wait with ready=true: do not sleep and hope; starting the same name and
command again reuses the running server. A ready server that dies is announced (event crashed).`

// MCPServer returns the underlying SDK server, for transports this package
// does not wrap.
func (s *Server) MCPServer() *sdk.Server { return s.mcp }

// Run serves one client over t (for example &sdk.StdioTransport{}) until
// the client disconnects or ctx is done.
func (s *Server) Run(ctx context.Context, t sdk.Transport) error {
	if err := s.mcp.Run(ctx, t); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("mcp: serve: %w", err)
	}
	return nil
}

// Close ends every client session and stops the notification pumps. It
// does not close the registry. Close is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	sessions := make([]*session, 0, len(s.sessions))
	for _, se := range s.sessions {
		sessions = append(sessions, se)
	}
	s.mu.Unlock()
	s.cancel()
	for _, se := range sessions {
		se.events.Close()
		se.notes.Close()
		_ = se.ss.Close()
	}
	s.wg.Wait()
	return nil
}

// session returns ss's state, creating it (and its subscriptions and
// notification pump) on first use. It returns nil once the Server is
// closed.
func (s *Server) session(ss *sdk.ServerSession) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	if se, ok := s.sessions[ss]; ok {
		return se
	}
	if s.closed {
		return nil
	}
	ctx, cancel := context.WithTimeout(s.ctx, sessionOpenTimeout)
	defer cancel()
	lease, err := s.reg.OpenSession(ctx, registry.SessionOptions{})
	if err != nil {
		s.log.Warn("session: no lease on the registry", "err", err)
		return nil
	}
	events, err := s.reg.Events(s.ctx)
	if err != nil {
		lease.Drop()
		s.log.Warn("session: no event subscription", "err", err)
		return nil
	}
	notes, err := s.reg.Events(s.ctx)
	if err != nil {
		events.Close()
		lease.Drop()
		s.log.Warn("session: no event subscription", "err", err)
		return nil
	}
	se := &session{ss: ss, lease: lease, id: lease.ID(), events: events, notes: notes, cursors: make(map[string]int64)}
	s.sessions[ss] = se
	s.wg.Add(2)
	go s.pump(se)
	go func() {
		// The SDK offers no callback when a session ends; its Wait does.
		defer s.wg.Done()
		_ = ss.Wait()
		s.mu.Lock()
		delete(s.sessions, ss)
		s.mu.Unlock()
		se.events.Close()
		se.notes.Close()
		s.endSession(se)
	}()
	return se
}

// Labels of the processes a session starts: SessionLabel names the
// session (corral ps --label mcp-session=ID finds them), PersistLabel marks
// those started with persist, which outlive it.
const (
	SessionLabel = "mcp-session"
	PersistLabel = "mcp-persist"
)

// sessionOpenTimeout bounds the opening of a session's lease.
const sessionOpenTimeout = 30 * time.Second

// sessionEndKill bounds the kill of a session's processes when it ends.
const sessionEndKill = 30 * time.Second

// endSession ends the session's lease: the registry kills what the
// session left running, except what it started with persist (those are
// not the lease's), which a later session (or a person, with corral ps
// and kill) takes over. Should this process die first, the daemon does
// the same when the lease drops.
func (s *Server) endSession(se *session) {
	ctx, cancel := context.WithTimeout(context.Background(), sessionEndKill)
	defer cancel()
	res, err := se.lease.End(ctx)
	if err != nil {
		s.log.Warn("session end: kill its processes", "session", se.id, "killed", len(res), "err", err)
	}
}

// pump turns registry events into MCP log notifications for one session.
func (s *Server) pump(se *session) {
	defer s.wg.Done()
	for {
		ev, err := se.notes.Next(s.ctx)
		if err != nil {
			return // subscription closed (session over) or Server closed
		}
		level, ok := notificationLevel(ev)
		if !ok {
			continue
		}
		if err := se.ss.Log(s.ctx, &sdk.LoggingMessageParams{Logger: LoggerName, Level: level, Data: ev}); err != nil {
			s.log.Debug("log notification not sent", "event", ev.Type, "id", ev.ID, "err", err)
		}
	}
}

// notificationLevel says whether ev is pushed to the client and at which
// level: a start is what the client just did, and an exit is pushed only
// when asked for (notify_on_complete, or the promise made when watching
// was disabled); everything else is news. A dev server's ready, crashed
// and ttl_expired events come at most once per process and are what its
// readiness conditions and ttl asked for, so they are always pushed; a
// crash is an error the agent must hear of before its next request to
// the server fails. So is oom_killed (at most once per process): the
// process ran out of memory, which its exit code alone does not say. A
// kill_finished is the outcome of a kill the agent was told is pending. A
// runaway is a warning: the process passed the thresholds it was started
// with (once per episode), and the agent decides what to do.
func notificationLevel(ev registry.Event) (sdk.LoggingLevel, bool) {
	switch ev.Type {
	case registry.EventExited, registry.EventReady:
		return "notice", ev.Type == registry.EventReady || ev.Notify
	case registry.EventWatchMatch:
		return "info", true
	case registry.EventWatchDisabled, registry.EventSuppressed, registry.EventTTLExpired, registry.EventRunaway, registry.EventWaitingInput:
		return "warning", true
	case registry.EventCrashed, registry.EventOOMKilled:
		return "error", true
	case registry.EventKillFinished:
		// The answer to a kill that came back unreachable: the agent was
		// told it would hear of it.
		return "notice", true
	}
	return "", false
}
