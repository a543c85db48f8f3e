package daemon

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/registry"
)

// Client talks to a daemon over its unix socket. The zero value is not
// usable; build it with NewClient. Safe for concurrent use.
type Client struct {
	socket string
	hc     *http.Client
}

// NewClient returns a client for the daemon listening on socket. It does
// not connect yet.
func NewClient(socket string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConns:    4,
		IdleConnTimeout: 30 * time.Second,
	}
	return &Client{socket: socket, hc: &http.Client{Transport: tr}}
}

// Socket returns the socket path the client dials.
func (c *Client) Socket() string { return c.socket }

// CloseIdle closes idle connections.
func (c *Client) CloseIdle() { c.hc.CloseIdleConnections() }

// do sends a request and decodes a 2xx JSON answer into out (if non-nil).
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	resp, err := c.send(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return readError(resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("daemon: %s %s: bad answer: %w", method, path, err)
	}
	return nil
}

// send sends a request; edit, when given, changes it before it goes.
func (c *Client) send(ctx context.Context, method, path string, q url.Values, body any, edit ...func(*http.Request)) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	u := "http://corral" + APIVersion + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, e := range edit {
		e(req)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if isNoDaemon(err) {
			return nil, fmt.Errorf("%w on %s", ErrNoDaemon, c.socket)
		}
		if ctx.Err() == nil && isLost(err) {
			return nil, fmt.Errorf("%w (%s %s)", ErrDaemonLost, method, path)
		}
		return nil, fmt.Errorf("daemon: %s %s: %w", method, path, err)
	}
	return resp, nil
}

func isNoDaemon(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

// isLost reports whether err is a connection that broke under a request.
func isLost(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func readError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var eb ErrorBody
	if json.Unmarshal(b, &eb) != nil || eb.Error == "" {
		eb = ErrorBody{Error: fmt.Sprintf("daemon answered %s: %s", resp.Status, strings.TrimSpace(string(b))), Code: CodeInternal}
	}
	return &APIError{Status: resp.StatusCode, Code: eb.Code, Message: eb.Error}
}

// Status returns the daemon's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	err := c.do(ctx, http.MethodGet, "/status", nil, nil, &st)
	return st, err
}

var _ registry.Service = (*Client)(nil)

// Start starts a process. A process the backend could not start is
// returned (state failed) with an error carrying its Reason.
func (c *Client) Start(ctx context.Context, opts registry.StartOptions) (registry.Info, error) {
	resp, err := c.send(ctx, http.MethodPost, "/processes", nil, startRequest(opts))
	if err != nil {
		return registry.Info{}, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusCreated, http.StatusOK, http.StatusUnprocessableEntity:
		var in registry.Info
		if err := json.NewDecoder(resp.Body).Decode(&in); err != nil {
			return in, fmt.Errorf("daemon: start: bad answer: %w", err)
		}
		if in.State == registry.StateFailed {
			msg := "daemon: start: " + in.Reason
			if code := resp.Header.Get(FailedStartCodeHeader); code != "" {
				return in, &APIError{Status: resp.StatusCode, Code: code, Message: msg}
			}
			return in, errors.New(msg)
		}
		return in, nil
	}
	return registry.Info{}, readError(resp)
}

// List lists processes.
func (c *Client) List(ctx context.Context, opts registry.ListOptions) ([]registry.Info, error) {
	q := url.Values{}
	if opts.All {
		q.Set("all", "1")
	}
	if opts.WithRef {
		q.Set("ref", "1")
	}
	if opts.Backend != "" {
		q.Set("backend", opts.Backend)
	}
	for _, s := range opts.States {
		q.Add("state", string(s))
	}
	for k, v := range opts.Labels {
		q.Add("label", k+"="+v)
	}
	if opts.Ports {
		q.Set("ports", "1")
	}
	var out []registry.Info
	err := c.do(ctx, http.MethodGet, "/processes", q, nil, &out)
	return out, err
}

// Get returns one process.
func (c *Client) Get(ctx context.Context, id string) (registry.Info, error) {
	var in registry.Info
	err := c.do(ctx, http.MethodGet, "/processes/"+url.PathEscape(id), nil, nil, &in)
	return in, err
}

// Stats returns what a process's tree costs now and over the last ten
// minutes, as the daemon's registry last sampled it.
func (c *Client) Stats(ctx context.Context, id string) (registry.StatsReport, error) {
	var rep registry.StatsReport
	err := c.do(ctx, http.MethodGet, "/processes/"+url.PathEscape(id)+"/stats", nil, nil, &rep)
	return rep, err
}

// Poll returns the state and the output since byte since.
func (c *Client) Poll(ctx context.Context, id string, since int64) (registry.PollResult, error) {
	var pr registry.PollResult
	err := c.do(ctx, http.MethodGet, "/processes/"+url.PathEscape(id)+"/output", url.Values{"since": {strconv.FormatInt(since, 10)}}, nil, &pr)
	return pr, err
}

// Follow streams the output from byte since on, calling onChunk for each
// piece, until the process ends (returning its final Info) or ctx is done.
func (c *Client) Follow(ctx context.Context, id string, since int64, onChunk func(OutputChunk) error) (registry.Info, error) {
	q := url.Values{"since": {strconv.FormatInt(since, 10)}, "follow": {"1"}}
	var final registry.Info
	var ch OutputChunk // its Data is reused: onChunk must not keep it
	err := c.stream(ctx, http.MethodGet, "/processes/"+url.PathEscape(id)+"/output", q, nil, func(event string, data []byte) (bool, error) {
		switch event {
		case "output":
			if err := decodeChunk(data, &ch); err != nil {
				return false, err
			}
			return true, onChunk(ch)
		case "end":
			return false, json.Unmarshal(data, &final)
		case "error":
			var eb ErrorBody
			json.Unmarshal(data, &eb)
			return false, &APIError{Status: http.StatusNotFound, Code: eb.Code, Message: eb.Error}
		}
		return true, nil
	})
	if err == nil && final.ID == "" {
		err = fmt.Errorf("daemon: output stream of %s ended early (the daemon stopped?)", id)
	}
	return final, err
}

// History returns the daemon's recent events (at most 256).
func (c *Client) History(ctx context.Context) ([]registry.Event, error) {
	var evs []registry.Event
	err := c.do(ctx, http.MethodGet, "/events", nil, nil, &evs)
	return evs, err
}

// FollowEvents streams events published from now on until ctx is done or
// onEvent returns an error. ready, when non-nil, is called once the
// subscription exists.
func (c *Client) FollowEvents(ctx context.Context, ready func(), onEvent func(registry.Event) error) error {
	return c.stream(ctx, http.MethodGet, "/events", url.Values{"follow": {"1"}}, nil, func(event string, data []byte) (bool, error) {
		switch event {
		case "":
			if ready != nil {
				ready()
			}
		case "event":
			var ev registry.Event
			if err := json.Unmarshal(data, &ev); err != nil {
				return false, err
			}
			return true, onEvent(ev)
		}
		return true, nil
	})
}

// stream reads an SSE response; on gets each event (comments as event "")
// and says whether to go on.
func (c *Client) stream(ctx context.Context, method, path string, q url.Values, body any, on func(event string, data []byte) (bool, error), edit ...func(*http.Request)) error {
	resp, err := c.send(ctx, method, path, q, body, edit...)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return readError(resp)
	}
	if resp.Header.Get("Content-Type") == FramesType {
		if err := readFrames(resp.Body, on); err != nil && ctx.Err() == nil {
			return fmt.Errorf("daemon: stream %s: %w", path, err)
		}
		return ctx.Err()
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var event string
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			if event != "" {
				more, err := on(event, data)
				if err != nil || !more {
					return err
				}
			}
			event, data = "", nil
		case line[0] == ':':
			if more, err := on("", nil); err != nil || !more {
				return err
			}
		default:
			k, v, _ := bytes.Cut(line, []byte(":"))
			v = bytes.TrimPrefix(v, []byte(" "))
			switch string(k) {
			case "event":
				event = string(v)
			case "data":
				data = append(data, v...)
			}
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("daemon: stream %s: %w", path, err)
	}
	return ctx.Err()
}

// Wait waits for the process to end, or timeout (0: no limit): then the
// error matches registry.ErrWaitTimeout, the Info is the current snapshot
// and the process still runs.
func (c *Client) Wait(ctx context.Context, id string, timeout time.Duration) (registry.Info, error) {
	return c.wait(ctx, id, timeout, false)
}

// WaitTree is Wait until nothing of the process's tree is left either.
func (c *Client) WaitTree(ctx context.Context, id string, timeout time.Duration) (registry.Info, error) {
	return c.wait(ctx, id, timeout, true)
}

// WaitReady waits until the process is ready, or its tree ended first
// (no error, ReadyAt zero), or timeout (0: no limit; the error matches
// registry.ErrWaitTimeout).
func (c *Client) WaitReady(ctx context.Context, id string, timeout time.Duration) (registry.Info, error) {
	return c.waitFor(ctx, id, timeout, "ready")
}

func (c *Client) wait(ctx context.Context, id string, timeout time.Duration, tree bool) (registry.Info, error) {
	if tree {
		return c.waitFor(ctx, id, timeout, "tree")
	}
	return c.waitFor(ctx, id, timeout, "")
}

// waitFor waits for the end, the tree's end (what "tree") or readiness
// (what "ready").
func (c *Client) waitFor(ctx context.Context, id string, timeout time.Duration, what string) (registry.Info, error) {
	q := url.Values{}
	if timeout > 0 {
		q.Set("timeout", timeout.String())
	}
	if what != "" {
		q.Set(what, "1")
	}
	var wr WaitResponse
	if err := c.do(ctx, http.MethodPost, "/processes/"+url.PathEscape(id)+"/wait", q, struct{}{}, &wr); err != nil {
		return wr.Info, err
	}
	if wr.TimedOut {
		if what == "ready" {
			return wr.Info, fmt.Errorf("daemon: wait %s: %w: not ready after %s", wr.ID, registry.ErrWaitTimeout, timeout)
		}
		return wr.Info, fmt.Errorf("daemon: wait %s: %w: still running after %s", wr.ID, registry.ErrWaitTimeout, timeout)
	}
	return wr.Info, nil
}

// Ports lists the listening TCP sockets of backend ("": the daemon's
// default) with their corral owners.
func (c *Client) Ports(ctx context.Context, backend string) ([]registry.PortInfo, error) {
	q := url.Values{}
	if backend != "" {
		q.Set("backend", backend)
	}
	var out []registry.PortInfo
	err := c.do(ctx, http.MethodGet, "/ports", q, nil, &out)
	return out, err
}

// Kill kills a process tree.
func (c *Client) Kill(ctx context.Context, id string, opts registry.KillOptions) (registry.KillResult, error) {
	resp, err := c.send(ctx, http.MethodPost, "/processes/"+url.PathEscape(id)+"/kill", nil, killRequest(opts))
	if err != nil {
		return registry.KillResult{}, err
	}
	defer resp.Body.Close()
	return resultOrError[registry.KillResult](resp, "kill "+id)
}

// resultOrError reads an answer that carries a result even when it is an
// error (a kill that was refused or left pending still says how far it
// got): the result, and an *APIError for a status other than 2xx.
func resultOrError[T any](resp *http.Response, what string) (T, error) {
	var out T
	var e struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	b, _ := io.ReadAll(resp.Body)
	if json.Unmarshal(b, &out) != nil || json.Unmarshal(b, &e) != nil {
		return out, fmt.Errorf("daemon: %s: bad answer %s: %.100q", what, resp.Status, b)
	}
	if resp.StatusCode/100 != 2 {
		return out, &APIError{Status: resp.StatusCode, Code: e.Code, Message: e.Error}
	}
	return out, nil
}

// KillPort kills the corral trees that listen on TCP port of backend (""
// = the daemon's default) and reports the programs corral did not start
// that hold it; see registry.Registry.KillPort.
func (c *Client) KillPort(ctx context.Context, backend string, port int, opts registry.KillOptions) (registry.PortKillResult, error) {
	var q url.Values
	if backend != "" {
		q = url.Values{"backend": {backend}}
	}
	resp, err := c.send(ctx, http.MethodPost, "/ports/"+strconv.Itoa(port)+"/kill", q, killRequest(opts))
	if err != nil {
		return registry.PortKillResult{Port: port}, err
	}
	defer resp.Body.Close()
	res, err := resultOrError[registry.PortKillResult](resp, "kill port "+strconv.Itoa(port))
	res.Port = cmp.Or(res.Port, port)
	return res, err
}

// KillAll kills every running process carrying all of opts.Labels.
func (c *Client) KillAll(ctx context.Context, opts registry.KillAllOptions) ([]registry.KillResult, error) {
	var out []registry.KillResult
	err := c.do(ctx, http.MethodPost, "/kill", nil, killAllRequest(opts), &out)
	return out, err
}

// Resize changes the terminal size of a process started with a PTY.
func (c *Client) Resize(ctx context.Context, id string, size env.WindowSize) error {
	return c.do(ctx, http.MethodPost, "/processes/"+url.PathEscape(id)+"/resize", nil, ResizeRequest{Rows: size.Rows, Cols: size.Cols}, nil)
}

// Write writes data to the process's stdin.
func (c *Client) Write(ctx context.Context, id string, data []byte) error {
	return c.Send(ctx, id, data, false)
}

// CloseStdin closes the process's stdin.
func (c *Client) CloseStdin(ctx context.Context, id string) error {
	return c.Send(ctx, id, nil, true)
}

// Submit writes line and the key that submits it.
func (c *Client) Submit(ctx context.Context, id, line string) error {
	return c.do(ctx, http.MethodPost, "/processes/"+url.PathEscape(id)+"/submit", nil, SubmitRequest{Line: line}, nil)
}

// Log returns a window of the process's output lines.
func (c *Client) Log(ctx context.Context, id string, opts registry.LogOptions) (registry.LogResult, error) {
	q := url.Values{}
	if opts.Offset != 0 {
		q.Set("offset", strconv.Itoa(opts.Offset))
	}
	if opts.Limit != 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.Strip {
		q.Set("strip", "1")
	}
	var lr registry.LogResult
	err := c.do(ctx, http.MethodGet, "/processes/"+url.PathEscape(id)+"/log", q, nil, &lr)
	return lr, err
}

// Send writes data to the process's stdin and closes it when eof is set.
func (c *Client) Send(ctx context.Context, id string, data []byte, eof bool) error {
	return c.do(ctx, http.MethodPost, "/processes/"+url.PathEscape(id)+"/stdin", nil, StdinRequest{Data: data, EOF: eof}, nil)
}

// Remove forgets a finished process.
func (c *Client) Remove(ctx context.Context, id string) error {
	_, err := c.remove(ctx, id, false)
	return err
}

// RemoveForce kills whatever of the process's tree still runs, then
// forgets it.
func (c *Client) RemoveForce(ctx context.Context, id string) error {
	_, err := c.remove(ctx, id, true)
	return err
}

// RemoveID is Remove or RemoveForce that returns the full ID removed.
func (c *Client) RemoveID(ctx context.Context, id string, force bool) (string, error) {
	return c.remove(ctx, id, force)
}

func (c *Client) remove(ctx context.Context, id string, force bool) (string, error) {
	var out struct {
		ID string `json:"id"`
	}
	var q url.Values
	if force {
		q = url.Values{"force": {"1"}}
	}
	err := c.do(ctx, http.MethodDelete, "/processes/"+url.PathEscape(id), q, nil, &out)
	return out.ID, err
}

// Shutdown stops the daemon; with killAll every process tree is killed
// first.
func (c *Client) Shutdown(ctx context.Context, killAll bool) (ShutdownResponse, error) {
	var out ShutdownResponse
	err := c.do(ctx, http.MethodPost, "/shutdown", nil, ShutdownRequest{KillAll: killAll}, &out)
	return out, err
}

// Events subscribes to the events published from now on: it returns once
// the daemon holds the subscription, so no later event is missed.
func (c *Client) Events(ctx context.Context) (registry.EventStream, error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	es := &eventStream{c: c, cancel: cancel, events: make(chan registry.Event, 64), done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		defer close(es.done)
		es.err = c.FollowEvents(sctx, func() {
			select {
			case <-ready:
			default:
				close(ready)
			}
		}, func(ev registry.Event) error {
			select {
			case es.events <- ev:
				return nil
			case <-sctx.Done():
				return sctx.Err()
			}
		})
	}()
	select {
	case <-ready:
		return es, nil
	case <-es.done:
		cancel()
		return nil, fmt.Errorf("daemon: subscribe to events: %w", es.err)
	case <-ctx.Done():
		cancel()
		<-es.done
		return nil, ctx.Err()
	}
}

// eventStream is an event subscription over one SSE response. Unlike the
// registry's, it does not drop events: a slow reader holds the stream
// back, and the daemon's subscription drops (and counts) them instead.
type eventStream struct {
	c      *Client
	cancel context.CancelFunc
	events chan registry.Event
	done   chan struct{} // closed when the stream ended; err is set then
	err    error
}

// Next hands over the next event. As in process, an exit whose final
// result a caller has received by now (Event.Consumed) is left out. The
// daemon decided that when it sent the event, which may be long before
// this reader takes it, so an exited event is checked again here: one Get,
// made even when ctx is done (a drain of what is queued), and on failure
// the event is delivered: a repeated exit is better than a lost one.
func (es *eventStream) Next(ctx context.Context) (registry.Event, error) {
	for {
		ev, err := es.next(ctx)
		if err != nil || ev.Type != registry.EventExited || !es.reported(ctx, ev.ID) {
			return ev, err
		}
	}
}

func (es *eventStream) reported(ctx context.Context, id string) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	info, err := es.c.Get(ctx, id)
	return err == nil && info.ResultReported
}

func (es *eventStream) next(ctx context.Context) (registry.Event, error) {
	// What is queued comes first, also to a done ctx (as in process).
	select {
	case ev := <-es.events:
		return ev, nil
	default:
	}
	select {
	case ev := <-es.events:
		return ev, nil
	case <-ctx.Done():
		return registry.Event{}, ctx.Err()
	case <-es.done:
		select {
		case ev := <-es.events:
			return ev, nil
		default:
		}
		return registry.Event{}, fmt.Errorf("daemon: next event: %w (%v)", registry.ErrClosed, es.err)
	}
}

func (es *eventStream) Close() {
	es.cancel()
	<-es.done
}

// Run runs a foreground process in the daemon, streaming its output to
// opts.Output while it runs. The connection is the process's lease: if
// this client dies, the daemon kills the tree. Cancelling ctx ends the
// lease the same way, and Run returns the result with ctx's error once
// the daemon has killed the tree (with opts.Grace, as the registry does).
func (c *Client) Run(ctx context.Context, opts registry.RunOptions) (registry.RunResult, error) {
	req := runRequest(opts)
	// The stream outlives ctx: after a cancel it brings the result of the
	// kill. It is cut when the daemon does not bring it in time, or when
	// the request never reached it.
	streamCtx, cut := context.WithCancel(context.WithoutCancel(ctx))
	defer cut()
	var (
		mu         sync.Mutex
		conn       net.Conn // the run's own connection, once there is one
		leased     = make(chan struct{})
		streamDone = make(chan struct{})
		halfClosed bool // read after leased is closed
	)
	streamCtx = httptrace.WithClientTrace(streamCtx, &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
		mu.Lock()
		conn = ci.Conn
		mu.Unlock()
	}})
	// One kill path for a run whose caller goes: the daemon's, when the
	// lease ends. A cancel ends it by closing the connection's write side,
	// which the daemon reads as the client gone, while the read side stays
	// open for the "end" that carries the kill's result. (The client used
	// to send a kill of its own, beside the daemon's.)
	stop := context.AfterFunc(ctx, func() {
		defer close(leased)
		mu.Lock()
		cw, ok := conn.(interface{ CloseWrite() error })
		mu.Unlock()
		if !ok || cw.CloseWrite() != nil {
			// No connection yet (the request never went, or is cut
			// short now), or one that cannot half-close: closing it ends
			// the lease just the same, without the result.
			cut()
			return
		}
		halfClosed = true
		bound := time.AfterFunc(opts.Grace+runKillBound, cut)
		go func() {
			<-streamDone
			bound.Stop()
		}()
	})
	out := opts.Output
	var ch OutputChunk // its Data is reused
	var end RunEnd
	gotEnd := false
	err := c.stream(streamCtx, http.MethodPost, "/run", nil, req, func(event string, data []byte) (bool, error) {
		switch event {
		case "started":
			var in registry.Info
			if err := json.Unmarshal(data, &in); err != nil {
				return false, err
			}
			if opts.Started != nil {
				opts.Started(in)
			}
		case "waiting_input":
			var w registry.WaitingInput
			if err := json.Unmarshal(data, &w); err != nil {
				return false, err
			}
			if opts.OnWaitingInput != nil {
				opts.OnWaitingInput(w)
			}
		case "output", "output.raw":
			if event == "output.raw" {
				ch.Offset, ch.Data = int64(binary.BigEndian.Uint64(data)), data[8:]
			} else if err := decodeChunk(data, &ch); err != nil {
				return false, err
			}
			if out != nil {
				if _, err := out.Write(ch.Data); err != nil {
					out = nil // as in process: a write error stops only the streaming
				}
			}
		case "end":
			gotEnd = true
			return false, json.Unmarshal(data, &end)
		}
		return true, nil
	}, func(r *http.Request) {
		// A half-closed connection must not go back to the pool.
		r.Close = true
		r.Header.Set("Accept", FramesType)
	})
	close(streamDone)
	res := end.RunResult
	if !stop() {
		// ctx ended before the stream did: the lease ended with it.
		<-leased
		switch {
		case !gotEnd && halfClosed:
			return res, fmt.Errorf("daemon: run: %w (the daemon did not report the kill of the tree within %s)", ctx.Err(), opts.Grace+runKillBound)
		case !gotEnd:
			return res, fmt.Errorf("daemon: run: %w", ctx.Err())
		case res.Kill == nil || res.Kill.Unreachable || len(res.Kill.Survivors) > 0:
			// The daemon's error says what went wrong with the kill.
			return res, fmt.Errorf("daemon: run %s: %w (the daemon: %s)", res.ID, ctx.Err(), end.Error)
		}
		return res, fmt.Errorf("daemon: run %s: %w", res.ID, ctx.Err())
	}
	if err != nil {
		return res, err
	}
	if !gotEnd {
		return res, fmt.Errorf("daemon: run: the stream ended without a result (the daemon stopped?)")
	}
	if end.Error != "" {
		return res, &APIError{Status: http.StatusOK, Code: end.Code, Message: end.Error}
	}
	return res, nil
}

// runKillBound bounds the wait for a cancelled Run's result beyond the
// grace: the daemon's kill takes the grace plus its own bound.
const runKillBound = 20 * time.Second

// Dashboard starts the daemon's dashboard on addr (empty: 127.0.0.1 and a
// free port) unless it runs already, and returns its URL, which carries
// the access token.
func (c *Client) Dashboard(ctx context.Context, addr string) (DashboardInfo, error) {
	var info DashboardInfo
	err := c.do(ctx, http.MethodPost, "/dashboard", nil, DashboardRequest{Addr: addr}, &info)
	return info, err
}
