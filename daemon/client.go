package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

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

func (c *Client) send(ctx context.Context, method, path string, q url.Values, body any) (*http.Response, error) {
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
	resp, err := c.hc.Do(req)
	if err != nil {
		if isNoDaemon(err) {
			return nil, fmt.Errorf("%w on %s", ErrNoDaemon, c.socket)
		}
		return nil, fmt.Errorf("daemon: %s %s: %w", method, path, err)
	}
	return resp, nil
}

func isNoDaemon(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
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

// Start starts a process. A process the backend could not start is
// returned (state failed) with an error carrying its Reason.
func (c *Client) Start(ctx context.Context, req StartRequest) (registry.Info, error) {
	resp, err := c.send(ctx, http.MethodPost, "/processes", nil, req)
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
			return in, fmt.Errorf("daemon: start: %s", in.Reason)
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
	err := c.stream(ctx, "/processes/"+url.PathEscape(id)+"/output", q, func(event string, data []byte) (bool, error) {
		switch event {
		case "output":
			var ch OutputChunk
			if err := json.Unmarshal(data, &ch); err != nil {
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

// Events returns the daemon's recent events (at most 256).
func (c *Client) Events(ctx context.Context) ([]registry.Event, error) {
	var evs []registry.Event
	err := c.do(ctx, http.MethodGet, "/events", nil, nil, &evs)
	return evs, err
}

// FollowEvents streams events published from now on until ctx is done or
// onEvent returns an error. ready, when non-nil, is called once the
// subscription exists.
func (c *Client) FollowEvents(ctx context.Context, ready func(), onEvent func(registry.Event) error) error {
	return c.stream(ctx, "/events", url.Values{"follow": {"1"}}, func(event string, data []byte) (bool, error) {
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
func (c *Client) stream(ctx context.Context, path string, q url.Values, on func(event string, data []byte) (bool, error)) error {
	resp, err := c.send(ctx, http.MethodGet, path, q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return readError(resp)
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

// Wait waits for the process to end, or timeout (0: no limit): then
// TimedOut is set and the process still runs.
func (c *Client) Wait(ctx context.Context, id string, timeout time.Duration) (WaitResponse, error) {
	return c.wait(ctx, id, timeout, false)
}

// WaitTree is Wait until nothing of the process's tree is left either.
func (c *Client) WaitTree(ctx context.Context, id string, timeout time.Duration) (WaitResponse, error) {
	return c.wait(ctx, id, timeout, true)
}

func (c *Client) wait(ctx context.Context, id string, timeout time.Duration, tree bool) (WaitResponse, error) {
	q := url.Values{}
	if timeout > 0 {
		q.Set("timeout", timeout.String())
	}
	if tree {
		q.Set("tree", "1")
	}
	var wr WaitResponse
	err := c.do(ctx, http.MethodPost, "/processes/"+url.PathEscape(id)+"/wait", q, struct{}{}, &wr)
	return wr, err
}

// Kill kills a process tree.
func (c *Client) Kill(ctx context.Context, id string, req KillRequest) (registry.KillResult, error) {
	resp, err := c.send(ctx, http.MethodPost, "/processes/"+url.PathEscape(id)+"/kill", nil, req)
	if err != nil {
		return registry.KillResult{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		registry.KillResult
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	if json.Unmarshal(b, &out) != nil {
		return registry.KillResult{}, fmt.Errorf("daemon: kill %s: bad answer %s: %q", id, resp.Status, b)
	}
	if resp.StatusCode/100 != 2 {
		return out.KillResult, &APIError{Status: resp.StatusCode, Code: out.Code, Message: out.Error}
	}
	return out.KillResult, nil
}

// KillAll kills every running process carrying all of req.Labels.
func (c *Client) KillAll(ctx context.Context, req KillAllRequest) ([]registry.KillResult, error) {
	var out []registry.KillResult
	err := c.do(ctx, http.MethodPost, "/kill", nil, req, &out)
	return out, err
}

// Resize changes the terminal size of a process started with a PTY.
func (c *Client) Resize(ctx context.Context, id string, rows, cols uint16) error {
	return c.do(ctx, http.MethodPost, "/processes/"+url.PathEscape(id)+"/resize", nil, ResizeRequest{Rows: rows, Cols: cols}, nil)
}

// Send writes data to the process's stdin and closes it when eof is set.
func (c *Client) Send(ctx context.Context, id string, data []byte, eof bool) error {
	return c.do(ctx, http.MethodPost, "/processes/"+url.PathEscape(id)+"/stdin", nil, StdinRequest{Data: data, EOF: eof}, nil)
}

// Remove forgets a finished process. With force, whatever of its tree
// still runs is killed first.
func (c *Client) Remove(ctx context.Context, id string, force bool) (string, error) {
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
