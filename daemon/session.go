package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/backoff"
	"github.com/corralhq/corral/registry"
)

// Session leases over the socket (registry/session.go has the policy).
//
// POST /v1/sessions opens a session and is its lease: the response is an
// SSE stream whose first event, "session", carries the session's ID, and
// which then stays open with nothing more to say. While the request lasts
// the front end holds the session. When it ends because the client went
// away (its process exited or was killed: the kernel closes its socket),
// the daemon drops the lease and the registry kills the session's
// processes at once. When it ends because the daemon stops, nothing is
// killed: the next daemon waits for the front end to open the session
// again (registry.Config.SessionReclaim).
//
// DELETE /v1/sessions/{id} ends the session (a front end's clean end):
// the answer, a SessionEnd, comes once its processes' trees are killed.
// GET /v1/sessions lists the sessions ([]registry.SessionInfo).

// SessionRequest is the body of POST /v1/sessions.
type SessionRequest struct {
	// ID opens that session again (a front end whose lease was lost with
	// the daemon); empty opens a new one.
	ID string `json:"id,omitempty"`
}

// SessionInfo is the "session" event of POST /v1/sessions.
type SessionInfo struct {
	ID string `json:"id"`
}

// SessionEnd answers DELETE /v1/sessions/{id}: the kills of the session's
// processes, and the error of those that failed ("" when none).
type SessionEnd struct {
	ID     string                `json:"id"`
	Killed []registry.KillResult `json:"killed"`
	Error  string                `json:"error,omitempty"`
}

// sessionEndTimeout bounds DELETE /v1/sessions/{id}: the kills run with
// the default grace, plus their verification.
const sessionEndTimeout = 2 * time.Minute

func (s *Server) handleSessionOpen(w http.ResponseWriter, r *http.Request) {
	var req SessionRequest
	if r.ContentLength != 0 {
		if err := s.decode(w, r, &req); err != nil {
			s.fail(w, err)
			return
		}
	}
	// The server notices a client that hangs up only once the body has
	// been read to its end: the lease depends on it.
	_, _ = io.Copy(io.Discard, r.Body)
	lease, err := s.reg.OpenSession(r.Context(), registry.SessionOptions{ID: req.ID})
	if err != nil {
		s.fail(w, err)
		return
	}
	// A read deadline would end the request (and drop the lease) while
	// the client lives: the lease has no body left to read, only a
	// connection to watch.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	sse, ok := s.startSSE(w)
	if !ok {
		lease.Drop()
		return
	}
	sse.send("session", SessionInfo{ID: lease.ID()})
	select {
	case <-r.Context().Done():
	case <-s.ctx.Done():
	}
	if s.ctx.Err() != nil {
		// The daemon stops: the session outlives it, for the next one.
		return
	}
	s.log.Info("session lease dropped: its front end went away without ending it", "session", lease.ID())
	lease.Drop()
}

func (s *Server) handleSessions(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.reg.Sessions())
}

// Sessions lists the daemon's sessions: those held, and those a restarted
// daemon waits for a front end to open again.
func (c *Client) Sessions(ctx context.Context) ([]registry.SessionInfo, error) {
	var out []registry.SessionInfo
	err := c.do(ctx, http.MethodGet, "/sessions", nil, nil, &out)
	return out, err
}

func (s *Server) handleSessionEnd(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	// Ending what a handle of this request holds ends the session for
	// every holder (the front end's lease stream among them).
	lease, err := s.reg.OpenSession(r.Context(), registry.SessionOptions{ID: id})
	if err != nil {
		s.fail(w, err)
		return
	}
	// An end runs to its end even if the client goes away: half of it
	// would leave trees behind.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), sessionEndTimeout)
	defer cancel()
	res, err := lease.End(ctx)
	end := SessionEnd{ID: id, Killed: res}
	if end.Killed == nil {
		end.Killed = []registry.KillResult{}
	}
	status := http.StatusOK
	if err != nil {
		end.Error, status = err.Error(), http.StatusInternalServerError
	}
	writeJSON(w, status, end)
}

// OpenSession opens a session in the daemon (a new one, or opts.ID again)
// and holds its lease until End or Drop: a long-lived POST /v1/sessions
// that the daemon watches. If this process dies, the daemon kills the
// session's processes. If the daemon goes away (a restart), the lease is
// opened again, with the same ID, as soon as a daemon answers on the
// socket. It returns once the daemon holds the session, or with ctx's
// error.
func (c *Client) OpenSession(ctx context.Context, opts registry.SessionOptions) (registry.SessionLease, error) {
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	body, id, err := c.openSession(ctx, lctx, opts.ID)
	if err != nil {
		cancel()
		return nil, err
	}
	cs := &clientSession{c: c, id: id, cancel: cancel, done: make(chan struct{})}
	go cs.hold(lctx, body)
	return cs, nil
}

// openSession sends POST /v1/sessions and reads up to the "session"
// event. The response body, left open, is the lease: lctx bounds it, and
// ctx only the wait for the event (a daemon that does not answer makes
// the open fail, not hang).
func (c *Client) openSession(ctx, lctx context.Context, id string) (io.ReadCloser, string, error) {
	rctx, cancel := context.WithCancel(lctx)
	stop := context.AfterFunc(ctx, cancel)
	fail := func(err error) (io.ReadCloser, string, error) {
		stop()
		cancel()
		if ctx.Err() != nil {
			return nil, "", fmt.Errorf("daemon: open session: %w", ctx.Err())
		}
		return nil, "", err
	}
	resp, err := c.send(rctx, http.MethodPost, "/sessions", nil, SessionRequest{ID: id})
	if err != nil {
		return fail(err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return fail(readError(resp))
	}
	br := bufio.NewReader(resp.Body)
	event := ""
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			resp.Body.Close()
			return fail(fmt.Errorf("daemon: open session: the stream ended before the session's ID (the daemon stopped?): %w", err))
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "session":
			var info SessionInfo
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &info); err != nil || !registry.ValidSessionID(info.ID) {
				resp.Body.Close()
				return fail(fmt.Errorf("daemon: open session: bad answer %.100q", line))
			}
			if !stop() {
				resp.Body.Close()
				return fail(ctx.Err())
			}
			return readCloser{Reader: br, Closer: resp.Body}, info.ID, nil
		}
	}
}

type readCloser struct {
	io.Reader
	io.Closer
}

// clientSession is a lease held through the daemon.
type clientSession struct {
	c      *Client
	id     string
	cancel context.CancelFunc // ends the lease's request, and hold
	done   chan struct{}      // closed when hold returned
	once   sync.Once
}

// reopenBackoff paces the attempts to open a lost lease again.
func reopenBackoff() backoff.Backoff {
	return backoff.Backoff{Min: 20 * time.Millisecond, Max: time.Second, Factor: 2}
}

// hold keeps the lease until ctx ends: when the stream breaks (the daemon
// stopped or crashed), it opens the session again as soon as a daemon
// answers.
func (s *clientSession) hold(ctx context.Context, body io.ReadCloser) {
	defer close(s.done)
	for {
		_, _ = io.Copy(io.Discard, body)
		body.Close()
		if ctx.Err() != nil {
			return
		}
		slog.Debug("session lease lost (the daemon stopped?): opening it again", "session", s.id)
		b := reopenBackoff()
		for {
			if backoff.Sleep(ctx, b.Next(), nil) != nil {
				return
			}
			var err error
			body, _, err = s.c.openSession(ctx, ctx, s.id)
			if err == nil {
				slog.Info("session lease held again", "session", s.id)
				break
			}
			if ctx.Err() != nil {
				return
			}
			slog.Debug("session lease: not opened again yet", "session", s.id, "err", err)
			s.c.CloseIdle() // a daemon that comes back is dialled afresh
		}
	}
}

func (s *clientSession) ID() string { return s.id }

// End ends the session in the daemon, then lets go of the lease.
func (s *clientSession) End(ctx context.Context) ([]registry.KillResult, error) {
	var (
		res []registry.KillResult
		err error
	)
	s.once.Do(func() {
		defer s.release()
		var end SessionEnd
		resp, serr := s.c.send(ctx, http.MethodDelete, "/sessions/"+url.PathEscape(s.id), nil, nil)
		if serr != nil {
			err = serr
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode/100 != 2 && resp.StatusCode != http.StatusInternalServerError {
			err = readError(resp)
			return
		}
		if derr := json.NewDecoder(resp.Body).Decode(&end); derr != nil {
			err = fmt.Errorf("daemon: end session %s: bad answer %s: %w", s.id, resp.Status, derr)
			return
		}
		res = end.Killed
		if end.Error != "" {
			err = &APIError{Status: resp.StatusCode, Code: CodeInternal, Message: end.Error}
		}
	})
	return res, err
}

// Drop lets go of the lease without ending the session: the daemon kills
// the session's processes, as for a front end that died.
func (s *clientSession) Drop() { s.once.Do(s.release) }

func (s *clientSession) release() {
	s.cancel()
	<-s.done
}
