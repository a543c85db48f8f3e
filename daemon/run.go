package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/registry"
)

// Config configures Run.
type Config struct {
	Paths Paths
	// Open resolves backend targets (the CLI's resolver). Required.
	Open func(ctx context.Context, target string) (env.Environment, error)
	// Logger receives the daemon's log. Default slog.Default().
	Logger *slog.Logger
	// Version is reported by GET /v1/status.
	Version string
	// MaxProcesses bounds tracked processes (default 4096).
	MaxProcesses int
	// DefaultGrace is the kill grace period when a request names none.
	DefaultGrace time.Duration
	// Runaway are the runaway thresholds of every process that gives
	// none (registry.Config.Runaway).
	Runaway *registry.RunawayOptions
	// HTTPAddr, when set, serves the dashboard on this loopback address
	// from the start (corral serve --http); otherwise the first POST
	// /v1/dashboard (corral dashboard) starts it.
	HTTPAddr string
	// Ready, when set, is called once the socket accepts connections.
	Ready func(Status)
	// BodyTimeout bounds the reading of a request's body (default
	// BodyTimeout).
	BodyTimeout time.Duration
	// SessionReclaim is registry.Config.SessionReclaim: how long a
	// restarted daemon waits for a front end to open its session again.
	SessionReclaim time.Duration
	// Owner, when not zero, is the PID of the process the daemon lives
	// for (OwnerEnv): once it has ended, the daemon kills every process
	// tree and stops.
	Owner int
}

// DefaultMaxProcesses is the daemon's default process limit: larger than
// the registry's, since one daemon serves every agent of a user.
const DefaultMaxProcesses = 4096

// stopTimeout bounds the graceful stop of the HTTP server.
const stopTimeout = 5 * time.Second

// recoverTimeout bounds the re-attach, after a restart, of the processes
// of the state file; one not re-attached by then is lost.
const recoverTimeout = 2 * time.Minute

// Run is `corral serve`: it takes the state directory's lock, reads the
// state file, serves the API on the socket until ctx is done or a client
// asks for a shutdown, then stops gracefully. It serves as soon as the
// state file is read: the processes it lists are re-attached in the
// background (registry.StartRecover), listed recovering until then.
//
// A graceful stop releases handles and keeps processes: detached processes
// keep running in their sandboxes (env/local's Close keeps them; other
// backends' environments are not closed at all, so that a docker-image
// sandbox is not removed) and the next daemon re-attaches them from the
// state file. Only processes their backend could not detach (see
// env.Capabilities' Reattach and ReattachPTY) end with the daemon. A
// shutdown with kill-all kills every tree first and then closes every
// environment, sandboxes included.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Open == nil {
		return errors.New("daemon: Config.Open is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxProcesses <= 0 {
		cfg.MaxProcesses = DefaultMaxProcesses
	}
	log := cfg.Logger.With("component", "daemon")
	p := cfg.Paths
	if err := ensurePrivateDir(p.StateDir); err != nil {
		return err
	}
	if err := ensurePrivateDir(filepath.Dir(p.Socket)); err != nil {
		return err
	}
	unlock, err := lockStateDir(p.LockFile())
	if err != nil {
		return err
	}
	defer unlock()

	var killAll atomic.Bool
	reg, err := registry.New(registry.Config{
		Open: func(ctx context.Context, target string) (env.Environment, error) {
			e, err := cfg.Open(ctx, target)
			if err != nil {
				return nil, err
			}
			re := &releasingEnv{Environment: e, killAll: &killAll}
			if _, ok := e.(env.TagFinder); ok {
				return taggedReleasingEnv{re}, nil
			}
			return re, nil
		},
		MaxProcesses: cfg.MaxProcesses,
		DefaultGrace: cfg.DefaultGrace,
		Runaway:      cfg.Runaway,
		Logger:       cfg.Logger,
		StateFile:    p.StateFile(),

		SessionReclaim: cfg.SessionReclaim,
	})
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	regClosed := false
	defer func() {
		if !regClosed {
			reg.Close()
		}
	}()
	// The socket is served as soon as the state file is read: processes
	// still re-attaching are listed recovering meanwhile, so a sandbox
	// that is slow to answer delays only its own processes, never the
	// daemon (and the clients that started it).
	rctx, cancelRecovery := context.WithTimeout(context.Background(), recoverTimeout)
	defer cancelRecovery()
	recovery, err := reg.StartRecover(rctx)
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	rep := recovery.Report()

	// We hold the lock: a socket file left here belongs to a dead daemon.
	if err := os.Remove(p.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("daemon: remove stale socket %s: %w", p.Socket, err)
	}
	ln, err := net.Listen("unix", p.Socket)
	if err != nil {
		return fmt.Errorf("daemon: listen on %s: %w", p.Socket, err)
	}
	defer os.Remove(p.Socket)
	if err := os.Chmod(p.Socket, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("daemon: chmod socket: %w", err)
	}

	dash, err := newDashboardHost(reg, cfg.Logger, cfg.DefaultGrace)
	if err != nil {
		return err
	}
	defer dash.close()
	if cfg.HTTPAddr != "" {
		info, err := dash.start(cfg.HTTPAddr)
		if err != nil {
			return fmt.Errorf("daemon: --http: %w", err)
		}
		// The one place the token is shown to whoever started the
		// daemon in the foreground.
		log.Info("dashboard: open this URL (it carries the access token)", "url", info.URL)
	}

	started := time.Now()
	status := func() Status {
		st := Status{
			PID: os.Getpid(), UID: os.Getuid(), Version: cfg.Version, StartedAt: started,
			Socket: p.Socket, StateFile: p.StateFile(), Processes: map[registry.State]int{},
			Recovered: recovery.Report(), Notice: rep.Notice, PeerCred: peerCredSupported,
		}
		all, _ := reg.List(context.Background(), registry.ListOptions{All: true})
		for _, in := range all {
			st.Processes[in.State]++
		}
		st.Backends = reg.Backends()
		if info, ok := dash.running(); ok {
			st.Dashboard = "http://" + info.Addr + "/"
		}
		var cerr error
		st.CheckpointWrites, cerr = reg.CheckpointStats()
		if cerr != nil {
			st.CheckpointError = cerr.Error()
		}
		return st
	}
	stopReq := make(chan struct{})
	var stopOnce sync.Once
	srv := NewServer(reg, cfg.Logger, status, func(kill bool) {
		if kill {
			killAll.Store(true)
		}
		stopOnce.Do(func() { close(stopReq) })
	})
	srv.dashboard = dash.start
	if cfg.BodyTimeout > 0 {
		srv.bodyTimeout = cfg.BodyTimeout
	}
	// Headers and bodies each have a deadline (the body's is lifted once
	// read, see BodyTimeout); a kept-alive connection with no request is
	// closed after IdleTimeout.
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug)}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(&peerListener{Listener: ln, log: log, uid: os.Getuid()}) }()
	log.Info("serving", "socket", p.Socket, "state_file", p.StateFile(), "pid", os.Getpid(), "recovered", rep.Restored, "recovering", rep.Recovering)
	if rep.Notice != "" {
		log.Error(rep.Notice)
	}
	if cfg.Ready != nil {
		cfg.Ready(status())
	}
	if cfg.Owner != 0 {
		octx, stopOwner := context.WithCancel(ctx)
		defer stopOwner()
		go watchOwner(octx, cfg.Owner, log, func() {
			killForOwner(reg, log)
			killAll.Store(true)
			stopOnce.Do(func() { close(stopReq) })
		})
	}

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("stopping: processes keep running and will be re-attached by the next daemon")
	case <-stopReq:
		log.Info("stopping on request", "kill_all", killAll.Load())
	case err := <-serveErr:
		runErr = fmt.Errorf("daemon: serve: %w", err)
	}
	srv.Close() // ends streams, so Shutdown does not wait for them
	dash.close()
	sctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
	}
	cancel()
	regClosed = true
	if err := reg.Close(); err != nil {
		log.Warn("closing environments", "err", err)
	}
	log.Info("stopped")
	return runErr
}

// releasingEnv closes its environment only when a shutdown killed every
// process, or for the local backend (whose Close keeps detached processes
// and only ends those it could not detach): a
// graceful stop must not remove a docker-image sandbox with its
// processes. The daemon process exits right after, which drops the
// connections the skipped Close would have released.
type releasingEnv struct {
	env.Environment
	killAll *atomic.Bool
}

// ConnStatus passes the environment's report on (env.ConnReporter), which
// embedding alone would hide.
func (e *releasingEnv) ConnStatus() env.ConnStatus {
	if r, ok := e.Environment.(env.ConnReporter); ok {
		return r.ConnStatus()
	}
	return env.ConnStatus{}
}

// Listeners and CheckURL pass the dev-server interfaces on (env.PortLister,
// env.URLChecker), which embedding alone would hide: without them the
// registry could list no ports and check no readiness URL through the
// daemon. An environment without them is reported unsupported, as its
// Capabilities already say.
func (e *releasingEnv) Listeners(ctx context.Context) ([]env.Listener, error) {
	if pl, ok := e.Environment.(env.PortLister); ok {
		return pl.Listeners(ctx)
	}
	return nil, fmt.Errorf("daemon: %s lists no ports: %w", e.Name(), env.ErrUnsupported)
}

// TreeListeners and Health pass the registry's one-look port listing
// (env.TreePortLister) and the health check (env.HealthChecker) on. An
// environment without them lists ports process by process (the registry
// falls back on ErrUnsupported) and is taken to be healthy.
func (e *releasingEnv) TreeListeners(ctx context.Context, procs []env.Process) ([][]env.Listener, error) {
	if tl, ok := e.Environment.(env.TreePortLister); ok {
		return tl.TreeListeners(ctx, procs)
	}
	return nil, fmt.Errorf("daemon: %s lists ports process by process: %w", e.Name(), env.ErrUnsupported)
}

// TreeStats passes the registry's measure of its trees (env.TreeStatter)
// on, which embedding alone would hide: without it the daemon would sample
// no process's cost. An environment without it is reported unsupported,
// and the registry stops asking.
func (e *releasingEnv) TreeStats(ctx context.Context, procs []env.Process) ([]*env.TreeStats, error) {
	if ts, ok := e.Environment.(env.TreeStatter); ok {
		return ts.TreeStats(ctx, procs)
	}
	return nil, fmt.Errorf("daemon: %s cannot measure its processes: %w", e.Name(), env.ErrUnsupported)
}

// InputWaits passes the registry's look for input waits (env.InputWatcher)
// on, which embedding alone would hide: without it the daemon would mark
// no process waiting_input. An environment without it is reported
// unsupported, and the registry stops asking.
func (e *releasingEnv) InputWaits(ctx context.Context, procs []env.Process) ([]*env.InputWait, error) {
	if iw, ok := e.Environment.(env.InputWatcher); ok {
		return iw.InputWaits(ctx, procs)
	}
	return nil, fmt.Errorf("daemon: %s cannot tell input waits: %w", e.Name(), env.ErrUnsupported)
}

func (e *releasingEnv) Health(ctx context.Context) env.Health {
	if hc, ok := e.Environment.(env.HealthChecker); ok {
		return hc.Health(ctx)
	}
	return env.Health{Condition: env.ConditionOK}
}

func (e *releasingEnv) CheckURL(ctx context.Context, rawURL string) (int, error) {
	if uc, ok := e.Environment.(env.URLChecker); ok {
		return uc.CheckURL(ctx, rawURL)
	}
	return 0, fmt.Errorf("daemon: %s checks no URLs: %w", e.Name(), env.ErrUnsupported)
}

// taggedReleasingEnv is a releasingEnv whose environment is an
// env.TagFinder, which embedding alone would hide: the registry looks for
// the processes of interrupted starts through it, and knows from the type
// whether it can.
type taggedReleasingEnv struct{ *releasingEnv }

func (e taggedReleasingEnv) Tagged(ctx context.Context, tags []string) (map[string][]env.Process, error) {
	return e.Environment.(env.TagFinder).Tagged(ctx, tags)
}

func (e *releasingEnv) Close() error {
	if e.killAll.Load() || e.Name() == "local" {
		return e.Environment.Close()
	}
	return nil
}

// peerListener accepts only connections from processes running as uid.
type peerListener struct {
	net.Listener
	log *slog.Logger
	uid int
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || !peerCredSupported {
			return c, err
		}
		uid, err := peerUID(c)
		if err == nil && uid == l.uid {
			return c, nil
		}
		l.log.Warn("refused a connection from another user: the corral socket serves only its owner",
			"peer_uid", uid, "owner_uid", l.uid, "err", err)
		go refuse(c, uid, l.uid)
	}
}

// refuse answers a refused peer with a 403 it can show, then hangs up.
func refuse(c net.Conn, peer, owner int) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if req, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
		req.Body.Close()
	}
	body := fmt.Sprintf(`{"error":"this corral daemon serves only uid %d; you are uid %d: start your own with corral serve","code":%q}`+"\n", owner, peer, CodeForbidden)
	fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}
