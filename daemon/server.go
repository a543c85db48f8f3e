package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/duration"
	"github.com/corralhq/corral/registry"
)

// eventHistory is how many past events GET /v1/events returns.
const eventHistory = 256

// maxBody bounds request bodies (stdin data and commands included).
const maxBody = 8 << 20

// BodyTimeout bounds the reading of a request body, from the handler's
// start to the body's end: a client that sends headers and then stalls (or
// never finishes its body) is answered 400 and cut, instead of holding a
// connection and a goroutine for ever. Headers are bounded apart
// (ReadHeaderTimeout, in Run). Once the body is read the deadline is
// lifted, so the long streams (run, output and events follow) and the
// leases that end with their connection are unaffected.
const BodyTimeout = 10 * time.Second

// Server serves a Registry over HTTP/JSON. Its Handler is mounted on the
// unix listener by Run; tests may mount it anywhere.
type Server struct {
	reg    *registry.Registry
	log    *slog.Logger
	status func() Status
	// shutdown is called by POST /v1/shutdown after the response was
	// prepared; it must not block.
	shutdown func(killAll bool)
	// dashboard starts (or finds) the dashboard for POST /v1/dashboard;
	// nil where there is none (a Server mounted by a test).
	dashboard func(addr string) (DashboardInfo, error)

	// bodyTimeout is BodyTimeout; tests shorten it.
	bodyTimeout time.Duration

	ctx    context.Context // cancelled by Close: ends streams
	cancel context.CancelFunc
	wg     sync.WaitGroup

	histMu  sync.Mutex
	history []registry.Event
}

// NewServer returns a Server for reg. status fills GET /v1/status;
// shutdown is called for POST /v1/shutdown. Close it when done.
func NewServer(reg *registry.Registry, log *slog.Logger, status func() Status, shutdown func(killAll bool)) *Server {
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{reg: reg, log: log, status: status, shutdown: shutdown, ctx: ctx, cancel: cancel, bodyTimeout: BodyTimeout}
	sub := reg.Subscribe()
	s.wg.Go(func() {
		defer sub.Close()
		for {
			ev, err := sub.Next(ctx)
			if err != nil {
				return
			}
			s.histMu.Lock()
			if len(s.history) == eventHistory {
				s.history = append(s.history[:0], s.history[1:]...)
			}
			s.history = append(s.history, ev)
			s.histMu.Unlock()
		}
	})
	return s
}

// Close ends the streams in progress and the event history goroutine.
func (s *Server) Close() {
	s.cancel()
	s.wg.Wait()
}

// Handler returns the API's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	v := APIVersion
	mux.HandleFunc("GET "+v+"/status", s.handleStatus)
	mux.HandleFunc("GET "+v+"/processes", s.handleList)
	mux.HandleFunc("POST "+v+"/processes", s.handleStart)
	mux.HandleFunc("GET "+v+"/processes/{id}", s.handleGet)
	mux.HandleFunc("GET "+v+"/processes/{id}/stats", s.handleStats)
	mux.HandleFunc("DELETE "+v+"/processes/{id}", s.handleRemove)
	mux.HandleFunc("GET "+v+"/processes/{id}/output", s.handleOutput)
	mux.HandleFunc("POST "+v+"/processes/{id}/wait", s.handleWait)
	mux.HandleFunc("POST "+v+"/processes/{id}/kill", s.handleKill)
	mux.HandleFunc("POST "+v+"/processes/{id}/stdin", s.handleStdin)
	mux.HandleFunc("GET "+v+"/sessions", s.handleSessions)
	mux.HandleFunc("POST "+v+"/sessions", s.handleSessionOpen)
	mux.HandleFunc("DELETE "+v+"/sessions/{id}", s.handleSessionEnd)
	mux.HandleFunc("POST "+v+"/processes/{id}/resize", s.handleResize)
	mux.HandleFunc("POST "+v+"/processes/{id}/submit", s.handleSubmit)
	mux.HandleFunc("GET "+v+"/processes/{id}/log", s.handleLog)
	mux.HandleFunc("POST "+v+"/run", s.handleRun)
	mux.HandleFunc("POST "+v+"/kill", s.handleKillAll)
	mux.HandleFunc("GET "+v+"/ports", s.handlePorts)
	mux.HandleFunc("POST "+v+"/ports/{port}/kill", s.handleKillPort)
	mux.HandleFunc("GET "+v+"/events", s.handleEvents)
	mux.HandleFunc("POST "+v+"/shutdown", s.handleShutdown)
	mux.HandleFunc("POST "+v+"/dashboard", s.handleDashboard)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, CodeNotFound, fmt.Sprintf("no endpoint %s %s: see docs/api.md", r.Method, clip(r.URL.Path, 100)))
	})
	return s.bodyDeadline(mux)
}

// bodyDeadline sets the connection's read deadline to bodyTimeout from
// now for a request that has a body, and lifts it once the body was read
// to its end (see BodyTimeout). A connection that cannot take deadlines (a
// test's recorder) is served as is.
func (s *Server) bodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || s.bodyTimeout <= 0 {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(s.bodyTimeout)) != nil {
			next.ServeHTTP(w, r)
			return
		}
		r.Body = &deadlineBody{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the read deadline when the body hits its end. The
// server starts watching the connection for the client's hang-up at that
// moment (which is how a run's lease ends); the lifted deadline applies to
// that pending read too.
type deadlineBody struct {
	io.ReadCloser
	lift   func()
	lifted bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.lifted {
		b.lifted = true
		b.lift()
	}
	return n, err
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, ErrorBody{Error: msg, Code: code})
}

func (s *Server) fail(w http.ResponseWriter, err error) {
	status, code := errorCode(err)
	if code == CodeInternal {
		s.log.Warn("request failed", "err", err)
	}
	writeError(w, status, code, err.Error())
}

// decode reads the request's JSON body into v, then the body's end (which
// lifts the body's read deadline; what follows the value is ignored). Its
// errors are short: a body's content is never repeated at length.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, maxBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		_, err = io.Copy(io.Discard, body)
	}
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w: request body not complete within %s: send the whole body at once", registry.ErrInvalidOptions, s.bodyTimeout)
	case errors.As(err, &tooLarge):
		return fmt.Errorf("%w: request body over %d MiB: a command must fit in it; write stdin in parts", registry.ErrInvalidOptions, maxBody>>20)
	}
	return fmt.Errorf("%w: request body: %s", registry.ErrInvalidOptions, clip(duration.Named(err).Error(), 200))
}

// clip returns s cut to at most n bytes (on a rune boundary), marked with
// "…" when cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.status())
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	opts := registry.ListOptions{Backend: q.Get("backend"), All: q.Get("all") == "1" || q.Get("all") == "true"}
	withRef, err := boolParam(r, "ref")
	if err != nil {
		s.fail(w, err)
		return
	}
	opts.WithRef = withRef
	if opts.Ports, err = boolParam(r, "ports"); err != nil {
		s.fail(w, err)
		return
	}
	for _, st := range q["state"] {
		if !registry.State(st).Valid() {
			s.fail(w, fmt.Errorf("%w: unknown state %q", registry.ErrInvalidOptions, st))
			return
		}
		opts.States = append(opts.States, registry.State(st))
	}
	labels, err := registry.ParseLabels(q["label"])
	if err != nil {
		s.fail(w, err)
		return
	}
	opts.Labels = labels
	list, err := s.reg.List(r.Context(), opts)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) handleStart(w http.ResponseWriter, r *http.Request) {
	var req StartRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, err)
		return
	}
	opts := req.Options()
	// The process must not depend on this request: a client that hangs up
	// while the backend starts it does not cancel the start.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 2*time.Minute)
	defer cancel()
	in, err := s.reg.Start(ctx, opts)
	if err != nil {
		if in.ID != "" {
			// Registered as failed: the reason is in Info, the class of the
			// error in a header, for a client that branches on it (a spec
			// the backend refused is the caller's to fix).
			_, code := errorCode(err)
			w.Header().Set(FailedStartCodeHeader, code)
			writeJSON(w, http.StatusUnprocessableEntity, in)
			return
		}
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, in)
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	in, err := s.reg.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, in)
}

// handleStats answers what a process's tree costs, from the registry's
// samples: it never waits for a backend.
func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) {
	rep, err := s.reg.Stats(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// boolParam reads an optional boolean query parameter ("1", "true", …).
func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%w: %s=%q: give 1 or 0", registry.ErrInvalidOptions, name, v)
	}
	return b, nil
}

func (s *Server) handleRemove(w http.ResponseWriter, r *http.Request) {
	id, err := s.reg.Resolve(r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	remove := s.reg.Remove
	if force, err := boolParam(r, "force"); err != nil {
		s.fail(w, err)
		return
	} else if force {
		remove = s.reg.RemoveForce
	}
	if err := remove(context.WithoutCancel(r.Context()), id); err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"id": id})
}

func (s *Server) handleOutput(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	q := r.URL.Query()
	var since int64
	if v := q.Get("since"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			s.fail(w, fmt.Errorf("%w: since %q: give a byte offset >= 0", registry.ErrInvalidOptions, v))
			return
		}
		since = n
	}
	if q.Get("follow") != "1" && q.Get("follow") != "true" {
		pr, err := s.reg.Poll(r.Context(), id, since)
		if err != nil {
			s.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, pr)
		return
	}
	full, err := s.reg.Resolve(id)
	if err != nil {
		s.fail(w, err)
		return
	}
	sse, ok := s.startSSE(w)
	if !ok {
		return
	}
	ctx, cancel := mergeDone(r.Context(), s.ctx)
	defer cancel()
	pr, err := s.reg.Follow(ctx, full, since, func(pr registry.PollResult) bool {
		return sse.sendChunk(OutputChunk{Offset: pr.Next - int64(len(pr.Output)), Data: pr.Output, Omitted: pr.OmittedBytes})
	})
	switch {
	case err != nil && ctx.Err() == nil:
		sse.send("error", ErrorBody{Error: err.Error(), Code: CodeNotFound})
	case err == nil && pr.State.Final():
		sse.send("end", pr.Info)
	}
}

func (s *Server) handleWait(w http.ResponseWriter, r *http.Request) {
	timeout, err := parseDuration("timeout", r.URL.Query().Get("timeout"))
	if err != nil {
		s.fail(w, err)
		return
	}
	wait := s.reg.Wait
	for _, alt := range []struct {
		param string
		wait  func(context.Context, string, time.Duration) (registry.Info, error)
	}{{"tree", s.reg.WaitTree}, {"ready", s.reg.WaitReady}} {
		if on, err := boolParam(r, alt.param); err != nil {
			s.fail(w, err)
			return
		} else if on {
			wait = alt.wait
		}
	}
	ctx, cancel := mergeDone(r.Context(), s.ctx)
	defer cancel()
	in, err := wait(ctx, r.PathValue("id"), timeout)
	switch {
	case errors.Is(err, registry.ErrWaitTimeout):
		writeJSON(w, http.StatusOK, WaitResponse{Info: in, TimedOut: true})
	case err != nil && ctx.Err() != nil && r.Context().Err() == nil:
		s.fail(w, fmt.Errorf("daemon: wait %s: %w: the daemon is stopping", in.ID, registry.ErrClosed))
	case err != nil:
		s.fail(w, err)
	default:
		writeJSON(w, http.StatusOK, WaitResponse{Info: in})
	}
}

// decodeKill reads a KillRequest body into the registry's options; on
// false the answer is written.
func (s *Server) decodeKill(w http.ResponseWriter, r *http.Request) (registry.KillOptions, bool) {
	var req KillRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, err)
		return registry.KillOptions{}, false
	}
	opts, err := req.Options()
	if err != nil {
		s.fail(w, err)
		return registry.KillOptions{}, false
	}
	return opts, true
}

func (s *Server) handleKill(w http.ResponseWriter, r *http.Request) {
	opts, ok := s.decodeKill(w, r)
	if !ok {
		return
	}
	// A kill runs to its end even if the client goes away: half a kill
	// (TERM sent, no escalation) would leave the tree behind.
	ctx := context.WithoutCancel(r.Context())
	res, err := s.reg.Kill(ctx, r.PathValue("id"), opts)
	if err != nil && res.ID == "" {
		s.fail(w, err)
		return
	}
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, struct {
			registry.KillResult
			Error string `json:"error"`
			Code  string `json:"code"`
		}{res, err.Error(), CodeInternal})
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) handleKillAll(w http.ResponseWriter, r *http.Request) {
	var req KillAllRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, err)
		return
	}
	opts, err := req.Options()
	if err != nil {
		s.fail(w, err)
		return
	}
	res, err := s.reg.KillAll(context.WithoutCancel(r.Context()), opts)
	if err != nil && res == nil {
		s.fail(w, err)
		return
	}
	if res == nil {
		res = []registry.KillResult{}
	}
	writeJSON(w, http.StatusOK, res)
}

// handlePorts answers GET /v1/ports?backend=B with the listening sockets of
// B (default: the daemon's default backend) and their corral owners.
func (s *Server) handlePorts(w http.ResponseWriter, r *http.Request) {
	ports, err := s.reg.Ports(r.Context(), r.URL.Query().Get("backend"))
	if err != nil {
		s.fail(w, err)
		return
	}
	if ports == nil {
		ports = []registry.PortInfo{}
	}
	writeJSON(w, http.StatusOK, ports)
}

// handleKillPort answers POST /v1/ports/{port}/kill?backend=B (body
// KillRequest) with a registry.PortKillResult: the registry finds the
// corral trees on the port and kills them.
func (s *Server) handleKillPort(w http.ResponseWriter, r *http.Request) {
	opts, ok := s.decodeKill(w, r)
	if !ok {
		return
	}
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil {
		s.fail(w, fmt.Errorf("%w: port %q: give a TCP port number", registry.ErrInvalidOptions, clip(r.PathValue("port"), 20)))
		return
	}
	// As a kill by ID, it runs to its end even if the client goes away.
	res, err := s.reg.KillPort(context.WithoutCancel(r.Context()), r.URL.Query().Get("backend"), port, opts)
	switch {
	case err != nil && len(res.Killed) == 0:
		s.fail(w, err)
	case err != nil:
		status, code := errorCode(err)
		writeJSON(w, status, struct {
			registry.PortKillResult
			Error string `json:"error"`
			Code  string `json:"code"`
		}{res, err.Error(), code})
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

func (s *Server) handleResize(w http.ResponseWriter, r *http.Request) {
	var req ResizeRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, err)
		return
	}
	id, err := s.reg.Resolve(r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	if err := s.reg.Resize(r.Context(), id, env.WindowSize{Rows: req.Rows, Cols: req.Cols}); err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "rows": req.Rows, "cols": req.Cols})
}

func (s *Server) handleStdin(w http.ResponseWriter, r *http.Request) {
	var req StdinRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, err)
		return
	}
	id, err := s.reg.Resolve(r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	if len(req.Data) > 0 {
		if err := s.reg.Write(r.Context(), id, req.Data); err != nil {
			s.fail(w, err)
			return
		}
	}
	if req.EOF {
		if err := s.reg.CloseStdin(r.Context(), id); err != nil {
			s.fail(w, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "written": len(req.Data), "eof": req.EOF})
}

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	if q := r.URL.Query().Get("follow"); q != "1" && q != "true" {
		// The history is served later than it was recorded: an exit a
		// caller has received since (wait, logs of the final state) is
		// left out now, as Subscription.Next would have left it out.
		s.histMu.Lock()
		evs := make([]registry.Event, 0, len(s.history))
		for _, ev := range s.history {
			if !ev.Consumed() {
				evs = append(evs, ev)
			}
		}
		s.histMu.Unlock()
		writeJSON(w, http.StatusOK, evs)
		return
	}
	sse, ok := s.startSSE(w)
	if !ok {
		return
	}
	sub := s.reg.Subscribe()
	defer sub.Close()
	ctx, cancel := mergeDone(r.Context(), s.ctx)
	defer cancel()
	sse.comment("subscribed")
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			return
		}
		if !sse.send("event", ev) {
			return
		}
	}
}

func (s *Server) handleShutdown(w http.ResponseWriter, r *http.Request) {
	var req ShutdownRequest
	if r.ContentLength != 0 {
		if err := s.decode(w, r, &req); err != nil {
			s.fail(w, err)
			return
		}
	}
	var resp ShutdownResponse
	if req.KillAll {
		res, err := s.reg.KillAll(context.WithoutCancel(r.Context()), registry.KillAllOptions{})
		resp.Killed = res
		if err != nil {
			resp.Error = err.Error()
		}
	}
	writeJSON(w, http.StatusOK, resp)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	s.shutdown(req.KillAll)
}

// mergeDone returns a context done when either a or b is.
func mergeDone(a, b context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(a)
	stop := context.AfterFunc(b, cancel)
	return ctx, func() { stop(); cancel() }
}

// sseWriter writes Server-Sent Events.
type sseWriter struct {
	w   http.ResponseWriter
	f   http.Flusher
	buf []byte // the event being written, reused
}

// sendChunk is send("output", ch) without encoding/json (see chunk.go).
func (s *sseWriter) sendChunk(ch OutputChunk) bool {
	return s.emit("output", func(buf []byte) []byte { return appendChunkJSON(buf, ch) })
}

// startSSE starts an SSE response, or answers that this connection
// cannot stream.
func (s *Server) startSSE(w http.ResponseWriter) (*sseWriter, bool) {
	sse, ok := newSSE(w)
	if !ok {
		s.failNoStream(w)
	}
	return sse, ok
}

func (s *Server) failNoStream(w http.ResponseWriter) {
	s.fail(w, errors.New("daemon: streaming unsupported by this connection"))
}

func newSSE(w http.ResponseWriter) (*sseWriter, bool) {
	f, ok := startStream(w, "text/event-stream")
	if !ok {
		return nil, false
	}
	return &sseWriter{w: w, f: f}, true
}

// startStream answers 200 with a streamed body of contentType, flushed at
// once, or reports that this connection cannot stream.
func startStream(w http.ResponseWriter, contentType string) (http.Flusher, bool) {
	f, ok := w.(http.Flusher)
	if !ok {
		return nil, false
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f.Flush()
	return f, true
}

// send writes one event with a JSON payload; false when the client left.
func (s *sseWriter) send(event string, v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		return false
	}
	return s.emit(event, func(buf []byte) []byte { return append(buf, b...) })
}

// emit writes one event whose data appendData appends, and flushes it.
func (s *sseWriter) emit(event string, appendData func([]byte) []byte) bool {
	s.buf = append(append(append(s.buf[:0], "event: "...), event...), "\ndata: "...)
	s.buf = append(appendData(s.buf), "\n\n"...)
	_, err := s.w.Write(s.buf)
	if cap(s.buf) > 4<<20 {
		s.buf = nil // a burst's buffer is not kept for an idle stream
	}
	if err != nil {
		return false
	}
	s.f.Flush()
	return true
}

func (s *sseWriter) comment(c string) {
	fmt.Fprintf(s.w, ": %s\n\n", c)
	s.f.Flush()
}

// handleRun runs a foreground process and streams it back; see RunRequest.
func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) {
	var req RunRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, err)
		return
	}
	// The server notices a client that hangs up only once the body has
	// been read to its end: the lease depends on it.
	_, _ = io.Copy(io.Discard, r.Body)
	opts := req.Options()
	var sse runStream
	var ok bool
	if r.Header.Get("Accept") == FramesType {
		if sse, ok = newFrames(w); !ok {
			s.failNoStream(w)
		}
	} else {
		sse, ok = s.startSSE(w)
	}
	if !ok {
		return
	}
	// The started event and the output come from the registry's
	// goroutines; the end from this one.
	var mu sync.Mutex
	var offset int64
	gone := false
	opts.Started = func(in registry.Info) {
		mu.Lock()
		defer mu.Unlock()
		gone = !sse.send("started", in)
	}
	opts.OnWaitingInput = func(w registry.WaitingInput) {
		mu.Lock()
		defer mu.Unlock()
		gone = gone || !sse.send("waiting_input", w)
	}
	opts.Output = writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		if gone || !sse.sendChunk(OutputChunk{Offset: offset, Data: p}) {
			gone = true
			return 0, errClientGone
		}
		offset += int64(len(p))
		return len(p), nil
	})
	// The request's context is the lease: a client that goes away
	// cancels Run, which kills the tree before returning. So does a
	// daemon that stops.
	ctx, cancel := mergeDone(r.Context(), s.ctx)
	defer cancel()
	res, err := s.reg.Run(ctx, opts)
	if err != nil && r.Context().Err() != nil {
		s.log.Info("run client went away; killed its process tree", "id", res.ID, "state", res.State)
	}
	end := RunEnd{RunResult: res}
	if err != nil {
		_, end.Code = errorCode(err)
		end.Error = err.Error()
	}
	mu.Lock()
	defer mu.Unlock()
	sse.send("end", end)
}

var errClientGone = errors.New("daemon: the client went away")

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (s *Server) handleSubmit(w http.ResponseWriter, r *http.Request) {
	var req SubmitRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, err)
		return
	}
	id, err := s.reg.Resolve(r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	if err := s.reg.Submit(r.Context(), id, req.Line); err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id})
}

// handleLog answers GET /v1/processes/{id}/log?offset=N&limit=N&strip=1
// with a registry.LogResult.
func (s *Server) handleLog(w http.ResponseWriter, r *http.Request) {
	var opts registry.LogOptions
	for _, f := range []struct {
		name string
		to   *int
	}{{"offset", &opts.Offset}, {"limit", &opts.Limit}} {
		v := r.URL.Query().Get(f.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			s.fail(w, fmt.Errorf("%w: %s=%q: give a whole number", registry.ErrInvalidOptions, f.name, v))
			return
		}
		*f.to = n
	}
	strip, err := boolParam(r, "strip")
	if err != nil {
		s.fail(w, err)
		return
	}
	opts.Strip = strip
	res, err := s.reg.Log(r.Context(), r.PathValue("id"), opts)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) handleDashboard(w http.ResponseWriter, r *http.Request) {
	var req DashboardRequest
	if err := s.decode(w, r, &req); err != nil {
		s.fail(w, err)
		return
	}
	if s.dashboard == nil {
		writeError(w, http.StatusNotFound, CodeNotFound, "this server has no dashboard")
		return
	}
	info, err := s.dashboard(req.Addr)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}
