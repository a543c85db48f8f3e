package dashboard

import (
	"context"
	"crypto/subtle"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/corralhq/corral/registry"
)

//go:embed static
var static embed.FS

// MaxMessage bounds a message from the browser; a longer one closes the
// connection (status 1009, message too big). The longest legitimate one is
// a line for stdin.
const MaxMessage = 64 << 10

// cookieName is the cookie that keeps the token after the first visit.
const cookieName = "corral_dashboard"

// minTokenLen keeps guessable tokens out: the token is all that guards a
// page that can kill every process of the user.
const minTokenLen = 32

// Live is what keeps the page live without polling, beyond Service: a
// signal at every change of the process list (Registry.Changed) and a
// process's output as it is written (Registry.Follow). The daemon's
// *registry.Registry implements it.
type Live interface {
	// Changed returns a channel closed at the next change of any
	// process's state.
	Changed() <-chan struct{}
	// Follow hands fn id's output from byte since as it comes, until fn
	// returns false, ctx ends, or the process ended and fn saw all of its
	// output; it returns the last PollResult (see Registry.Follow).
	Follow(ctx context.Context, id string, since int64, fn func(registry.PollResult) bool) (registry.PollResult, error)
}

// Config configures a Server.
type Config struct {
	// Service lists and acts on the processes (kill, stdin, remove): the
	// same policy layer as every other front end. Required.
	Service registry.Service
	// Live tells the hub when to look again and streams output.
	// Required.
	Live Live
	// Token is the secret a visitor must present (at least 32
	// characters, URL-safe). Required.
	Token string
	// KillGrace is the time between SIGTERM and SIGKILL of "kill"; zero
	// means the registry's default.
	KillGrace time.Duration
	// Logger receives connection errors. Default slog.Default().
	Logger *slog.Logger
}

// Server serves the dashboard. Create it with New, mount Handler, and
// Close it when the daemon stops.
type Server struct {
	cfg    Config
	log    *slog.Logger
	ctx    context.Context // done at Close; ends connections and the hub
	cancel context.CancelFunc
	hub    *hub
	files  http.Handler

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup // the hub and every connection; Add under mu
}

// New starts a Server's hub, which follows cfg.Live's changes.
func New(cfg Config) (*Server, error) {
	if cfg.Service == nil || cfg.Live == nil {
		return nil, errors.New("dashboard: Config.Service and Config.Live are required")
	}
	if len(cfg.Token) < minTokenLen || strings.ContainsAny(cfg.Token, "&?#=/ \t\n") {
		return nil, fmt.Errorf("dashboard: Config.Token must be at least %d URL-safe characters", minTokenLen)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	sub, err := fs.Sub(static, "static")
	if err != nil {
		return nil, fmt.Errorf("dashboard: embedded files: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg: cfg, log: cfg.Logger.With("component", "dashboard"), ctx: ctx, cancel: cancel,
		files: http.FileServer(http.FS(sub)),
	}
	s.hub = newHub(cfg.Service, cfg.Live, s.log)
	s.wg.Go(func() { s.hub.run(ctx) })
	return s, nil
}

// Close ends every connection and the hub, and waits for them.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

// Handler serves the page, its files and the WebSocket.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.handleIndex)
	mux.Handle("GET /static/", s.authorized(http.StripPrefix("/static/", s.files)))
	mux.Handle("GET /ws", s.authorized(http.HandlerFunc(s.handleWS)))
	mux.Handle("/", s.authorized(http.NotFoundHandler()))
	return securityHeaders(mux)
}

// securityHeaders forbids framing and inline script, and keeps the token
// out of Referer headers.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// validToken compares in constant time.
func (s *Server) validToken(tok string) bool {
	return tok != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.Token)) == 1
}

// allowed reports whether r carries the token: the cookie, a bearer
// header (scripts, tests) or the token query parameter.
func (s *Server) allowed(r *http.Request) bool {
	if c, err := r.Cookie(cookieName); err == nil && s.validToken(c.Value) {
		return true
	}
	if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && s.validToken(bearer) {
		return true
	}
	return s.validToken(r.URL.Query().Get("token"))
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusUnauthorized)
	fmt.Fprintln(w, "401 unauthorized: open the URL that `corral dashboard` prints (it carries the token once)")
}

func (s *Server) authorized(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.allowed(r) {
			unauthorized(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// handleIndex trades the token of the URL for a cookie, then serves the
// page from the bare URL, so the token leaves the address bar and history.
func (s *Server) handleIndex(w http.ResponseWriter, r *http.Request) {
	if tok := r.URL.Query().Get("token"); tok != "" {
		if !s.validToken(tok) {
			unauthorized(w)
			return
		}
		http.SetCookie(w, &http.Cookie{
			Name: cookieName, Value: tok, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		})
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if !s.allowed(r) {
		unauthorized(w)
		return
	}
	page, err := static.ReadFile("static/index.html")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(page)
}

func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	// Accept refuses a browser whose Origin is another host than the
	// page's: the cookie alone must not let another site drive this.
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		s.log.Debug("websocket handshake refused", "err", err)
		return
	}
	ws.SetReadLimit(MaxMessage)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ws.Close(websocket.StatusGoingAway, "the daemon is stopping")
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	newConn(s, ws).serve(s.ctx)
}
