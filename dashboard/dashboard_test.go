package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
	"github.com/corralhq/corral/internal/shellquote"
	"github.com/corralhq/corral/internal/testing/proctest"
	"github.com/corralhq/corral/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	testToken = "0123456789abcdef0123456789abcdef0123456789abcdef"
	generous  = 30 * time.Second
)

type fixture struct {
	t   testing.TB
	reg *registry.Registry
	srv *httptest.Server
}

// newFixture serves a dashboard over a registry on the real local backend.
func newFixture(t testing.TB) *fixture {
	t.Helper()
	return newFixtureWith(t, func(reg *registry.Registry) registry.Service { return reg })
}

// newFixtureWith serves a dashboard whose Service is service(the
// registry).
func newFixtureWith(t testing.TB, service func(*registry.Registry) registry.Service) *fixture {
	t.Helper()
	dir := t.TempDir()
	reg, err := registry.New(registry.Config{
		Open: func(ctx context.Context, target string) (env.Environment, error) {
			return local.New(local.Options{StateDir: dir, Logger: slog.New(slog.DiscardHandler)})
		},
		DefaultGrace: 300 * time.Millisecond,
		Logger:       slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	d, err := New(Config{Service: service(reg), Live: reg, Token: testToken, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(func() {
		d.Close()
		srv.Close()
		reg.Close()
	})
	return &fixture{t: t, reg: reg, srv: srv}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	t.Cleanup(cancel)
	return ctx
}

// client is a WebSocket client that keeps every message it received.
type client struct {
	t    testing.TB
	ws   *websocket.Conn
	msgs chan map[string]any
	done chan error // the read loop's end
}

func (f *fixture) dial(header http.Header) (*client, *http.Response, error) {
	url := "ws" + strings.TrimPrefix(f.srv.URL, "http") + "/ws"
	ws, resp, err := websocket.Dial(ctxT(f.t), url, &websocket.DialOptions{HTTPHeader: header})
	if err != nil {
		return nil, resp, err
	}
	ws.SetReadLimit(-1) // a browser reads a list of any length
	c := &client{t: f.t, ws: ws, msgs: make(chan map[string]any, 4096), done: make(chan error, 1)}
	go func() {
		for {
			_, data, err := ws.Read(context.Background())
			if err != nil {
				c.done <- err
				close(c.msgs)
				return
			}
			var m map[string]any
			if err := json.Unmarshal(data, &m); err != nil {
				c.done <- fmt.Errorf("server sent no JSON: %q", data)
				close(c.msgs)
				return
			}
			c.msgs <- m
		}
	}()
	f.t.Cleanup(func() { ws.CloseNow() })
	return c, resp, nil
}

func (f *fixture) connect() *client {
	f.t.Helper()
	c, _, err := f.dial(http.Header{"Authorization": {"Bearer " + testToken}})
	require.NoError(f.t, err)
	first := c.next(func(m map[string]any) bool { return true })
	require.Equal(f.t, "sessions", first["type"], "the first message is the list")
	return c
}

// next returns the first message (from now on) that match accepts.
func (c *client) next(match func(map[string]any) bool) map[string]any {
	c.t.Helper()
	timeout := time.After(generous)
	for {
		select {
		case m, ok := <-c.msgs:
			if !ok {
				require.FailNow(c.t, "connection ended", "%v", <-c.done)
			}
			if match(m) {
				return m
			}
		case <-timeout:
			require.FailNow(c.t, "no matching message")
		}
	}
}

// collect returns the first message of each of types, which may arrive
// in any order.
func (c *client) collect(types ...string) map[string]map[string]any {
	c.t.Helper()
	got := map[string]map[string]any{}
	for len(got) < len(types) {
		m := c.next(func(m map[string]any) bool {
			for _, typ := range types {
				if m["type"] == typ && got[typ] == nil {
					return true
				}
			}
			return false
		})
		got[m["type"].(string)] = m
	}
	return got
}

func (c *client) write(v any) {
	c.t.Helper()
	b, err := json.Marshal(v)
	require.NoError(c.t, err)
	require.NoError(c.t, c.ws.Write(ctxT(c.t), websocket.MessageText, b))
}

func ofType(typ string) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["type"] == typ }
}

func sessionState(id, state string) func(map[string]any) bool {
	return func(m map[string]any) bool {
		s, _ := m["session"].(map[string]any)
		return m["type"] == "session_updated" && s["id"] == id && (state == "" || s["state"] == state)
	}
}

// The process table is searched for exactly the processes a test started
// (internal/testing/proctest).
var (
	marker   = proctest.Marker
	sleepers = proctest.Sleepers
)

func TestTokenRequired(t *testing.T) {
	f := newFixture(t)
	for _, path := range []string{"/", "/static/app.js", "/ws", "/?token=wrong" + testToken[5:]} {
		resp, err := http.Get(f.srv.URL + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, path)
		assert.NotContains(t, string(body), "<html", "%s leaks page content without the token", path)
	}
	_, resp, err := f.dial(nil)
	require.Error(t, err, "a WebSocket without the token")
	require.NotNil(t, resp)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	// The URL's token becomes a cookie, and the page is served from the
	// bare URL with it.
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err = noRedirect.Get(f.srv.URL + "/?token=" + testToken)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/", resp.Header.Get("Location"))
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == cookieName {
			cookie = c
		}
	}
	require.NotNil(t, cookie)
	assert.True(t, cookie.HttpOnly)
	assert.Equal(t, http.SameSiteStrictMode, cookie.SameSite)
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/", nil)
	req.AddCookie(cookie)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), "<title>corral</title>")
}

// A browser of another site is refused even with the cookie.
func TestWebSocketRefusesOtherOrigins(t *testing.T) {
	f := newFixture(t)
	_, resp, err := f.dial(http.Header{"Cookie": {cookieName + "=" + testToken}, "Origin": {"http://evil.example"}})
	require.Error(t, err)
	require.NotNil(t, resp)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
}

func TestProtocolErrorsKeepTheConnection(t *testing.T) {
	f := newFixture(t)
	c := f.connect()

	c.write(map[string]any{"type": "force_kill", "sessionId": "proc_000000000000"})
	res := c.next(ofType("force_kill_result"))
	assert.Equal(t, false, res["success"])
	assert.Equal(t, "proc_000000000000", res["sessionId"])
	assert.Contains(t, res["message"], "no process proc_000000000000")

	require.NoError(t, c.ws.Write(ctxT(t), websocket.MessageText, []byte(`{"type": "kill", `)))
	assert.Contains(t, c.next(ofType("error"))["message"], "malformed message")
	c.write(map[string]any{"type": "explode", "sessionId": "proc_000000000000"})
	assert.Contains(t, c.next(ofType("error"))["message"], `unknown message type "explode"`)
	c.write(map[string]any{"type": "kill"})
	assert.Contains(t, c.next(ofType("error"))["message"], "needs a sessionId")

	// Still open: a valid message is answered.
	c.write(map[string]any{"type": "remove", "sessionId": "proc_000000000000"})
	assert.Equal(t, false, c.next(ofType("remove_result"))["success"])
}

func TestMessageOverTheLimitClosesTheConnection(t *testing.T) {
	f := newFixture(t)
	c := f.connect()
	big := strings.Repeat("x", MaxMessage+1)
	_ = c.ws.Write(ctxT(t), websocket.MessageText, []byte(`{"type":"send_stdin","sessionId":"p","line":"`+big+`"}`))
	select {
	case err := <-c.done:
		assert.Equal(t, websocket.StatusMessageTooBig, websocket.CloseStatus(err), "closed with %v", err)
	case <-time.After(generous):
		require.FailNow(t, "the connection stayed open")
	}
}

// Force kill of a TERM-ignoring tree with a setsid escapee: SIGKILL at
// once, verified, nothing left; every browser sees the row turn killed,
// and it stays listed.
func TestForceKillTree(t *testing.T) {
	f := newFixture(t)
	a, b := f.connect(), f.connect()
	m := marker()
	in, err := f.reg.Start(ctxT(t), registry.StartOptions{
		Command: fmt.Sprintf("trap '' TERM; setsid sleep %s & sleep %s & echo ready; wait", m, m),
	})
	require.NoError(t, err)
	a.next(sessionState(in.ID, "running"))
	b.next(sessionState(in.ID, "running"))
	require.Eventually(t, func() bool { return len(sleepers(m)) == 2 }, generous, 10*time.Millisecond)

	a.write(map[string]any{"type": "subscribe_output", "sessionId": in.ID, "offset": 0})
	out := a.next(ofType("output"))
	assert.Equal(t, in.ID, out["sessionId"])
	assert.Equal(t, "cmVhZHkK", out["data"], "base64 of ready\\n")

	a.write(map[string]any{"type": "force_kill", "sessionId": in.ID})
	// The result and the end of the output come in either order.
	got := a.collect("force_kill_result", "output_end")
	res := got["force_kill_result"]
	assert.Equal(t, in.ID, got["output_end"]["sessionId"])
	assert.Equal(t, true, res["success"], "%v", res)
	assert.Equal(t, true, res["forced"])
	assert.Equal(t, in.ID, res["sessionId"])
	assert.Empty(t, sleepers(m), "processes of the tree survived")

	// The other browser sees the row turn killed, with nothing left
	// running (an update in between may count the escapee the kill was
	// still ending).
	b.next(func(m map[string]any) bool {
		s, _ := m["session"].(map[string]any)
		return m["type"] == "session_updated" && s["id"] == in.ID && s["state_text"] == "killed (SIGKILL)"
	})

	// Again: the process had ended; that is a success that says so.
	a.write(map[string]any{"type": "force_kill", "sessionId": in.ID})
	res = a.next(ofType("force_kill_result"))
	assert.Equal(t, true, res["success"])
	assert.Equal(t, false, res["forced"])
	assert.Contains(t, res["message"], "had already ended")

	// A new browser still gets it in the list.
	c, _, err := f.dial(http.Header{"Authorization": {"Bearer " + testToken}})
	require.NoError(t, err)
	list := c.next(ofType("sessions"))["sessions"].([]any)
	require.Len(t, list, 1)
	assert.Equal(t, "killed", list[0].(map[string]any)["state"])
}

func TestKillStdinRemove(t *testing.T) {
	f := newFixture(t)
	c := f.connect()
	in, err := f.reg.Start(ctxT(t), registry.StartOptions{Command: `read -r line; echo "got $line"; sleep 30`, Stdin: true})
	require.NoError(t, err)
	c.next(sessionState(in.ID, "running"))
	c.write(map[string]any{"type": "subscribe_output", "sessionId": in.ID})

	c.write(map[string]any{"type": "send_stdin", "sessionId": in.ID, "line": "two\nlines"})
	assert.Equal(t, false, c.next(ofType("send_stdin_result"))["success"])
	c.write(map[string]any{"type": "send_stdin", "sessionId": in.ID, "line": "hello"})
	got := c.collect("send_stdin_result", "output")
	assert.Equal(t, true, got["send_stdin_result"]["success"])
	assert.Equal(t, "Z290IGhlbGxvCg==", got["output"]["data"], "base64 of got hello\\n")

	c.write(map[string]any{"type": "remove", "sessionId": in.ID})
	assert.Equal(t, false, c.next(ofType("remove_result"))["success"], "a running process cannot be removed")

	c.write(map[string]any{"type": "kill", "sessionId": in.ID})
	got = c.collect("kill_result", "output_end")
	res := got["kill_result"]
	assert.Equal(t, true, res["success"], "%v", res)
	assert.Equal(t, false, res["forced"], "sleep ends on SIGTERM")

	c.write(map[string]any{"type": "remove", "sessionId": in.ID})
	got = c.collect("remove_result", "session_removed")
	assert.Equal(t, true, got["remove_result"]["success"])
	assert.Equal(t, in.ID, got["session_removed"]["sessionId"])
}

// refusing is a Service with a policy of its own: it refuses every
// remove, and counts the lists it answers.
type refusing struct {
	registry.Service
	lists atomic.Int32
}

func (r *refusing) Remove(context.Context, string) error {
	return fmt.Errorf("%w: refused by the policy layer", registry.ErrInvalidOptions)
}

func (r *refusing) List(ctx context.Context, opts registry.ListOptions) ([]registry.Info, error) {
	r.lists.Add(1)
	return r.Service.List(ctx, opts)
}

// TestActionsGoThroughService: the dashboard lists and acts through the
// Service it is given, like every front end, not around it.
func TestActionsGoThroughService(t *testing.T) {
	svc := &refusing{}
	f := newFixtureWith(t, func(reg *registry.Registry) registry.Service { svc.Service = reg; return svc })
	c := f.connect()
	assert.Positive(t, svc.lists.Load(), "the list came from the Service")
	in, err := f.reg.Start(ctxT(t), registry.StartOptions{Command: "true"})
	require.NoError(t, err)
	c.next(sessionState(in.ID, "exited"))
	c.write(map[string]any{"type": "remove", "sessionId": in.ID})
	res := c.next(ofType("remove_result"))
	assert.Equal(t, false, res["success"])
	assert.Contains(t, res["message"], "refused by the policy layer")
}

// column returns the text in column key of a session message's row.
func column(t testing.TB, columns []any, m map[string]any, key string) string {
	t.Helper()
	s, _ := m["session"].(map[string]any)
	row, _ := s["row"].([]any)
	for i, c := range columns {
		if c.(map[string]any)["key"] == key && i < len(row) {
			return row[i].(string)
		}
	}
	require.FailNow(t, "no such column", "%q in %v of %v", key, columns, m)
	return ""
}

// TestRowsAsPSShowsThem: the page gets the columns of corral ps and each
// process's texts in them from the registry: its name, the state with
// readiness, the time left, the ports its tree listens on (looked up by
// the hub, as ps does) and the command as typed.
func TestRowsAsPSShowsThem(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: it serves the port of this test")
	}
	f := newFixture(t)
	c, _, err := f.dial(http.Header{"Authorization": {"Bearer " + testToken}})
	require.NoError(t, err)
	columns := c.next(ofType("sessions"))["columns"].([]any)
	var keys []string
	for _, col := range columns {
		keys = append(keys, col.(map[string]any)["key"].(string))
	}
	var want []string
	for _, col := range registry.ListColumns() {
		want = append(want, col.Key)
	}
	require.Equal(t, want, keys)

	port := freePort(t)
	in, err := f.reg.Start(ctxT(t), registry.StartOptions{
		Command: shellquote.Join([]string{python, "-m", "http.server", strconv.Itoa(port), "--bind", "127.0.0.1"}),
		Name:    "web", TTL: time.Hour, Ready: &registry.ReadyOptions{Port: port},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = f.reg.Kill(context.Background(), in.ID, registry.KillOptions{Force: true}) })
	m := c.next(func(m map[string]any) bool {
		return sessionState(in.ID, "running")(m) && column(t, columns, m, "ports") == strconv.Itoa(port) &&
			column(t, columns, m, "state") == "running, ready"
	})
	assert.Equal(t, "web", column(t, columns, m, "name"))
	assert.Equal(t, python+" -m http.server "+strconv.Itoa(port)+" --bind 127.0.0.1", column(t, columns, m, "command"))
	assert.Regexp(t, `^59m\d+s$`, column(t, columns, m, "left"))
	assert.Equal(t, in.ID, column(t, columns, m, "id"))
}

// TestRowsCountWithTheClock: AGE changes with no change of state, and
// the page is told.
func TestRowsCountWithTheClock(t *testing.T) {
	f := newFixture(t)
	c, _, err := f.dial(http.Header{"Authorization": {"Bearer " + testToken}})
	require.NoError(t, err)
	columns := c.next(ofType("sessions"))["columns"].([]any)
	in, err := f.reg.Start(ctxT(t), registry.StartOptions{Command: "sleep 30"})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = f.reg.Kill(context.Background(), in.ID, registry.KillOptions{Force: true}) })
	first := column(t, columns, c.next(sessionState(in.ID, "running")), "age")
	c.next(func(m map[string]any) bool {
		age := column(t, columns, m, "age")
		return sessionState(in.ID, "running")(m) && age != first && strings.HasSuffix(age, "s")
	})
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// hangingPorts is a Service whose look-ups of ports never answer, as
// from a backend that hangs.
type hangingPorts struct {
	registry.Service
	looks atomic.Int32
}

func (h *hangingPorts) List(ctx context.Context, opts registry.ListOptions) ([]registry.Info, error) {
	if opts.Ports {
		h.looks.Add(1)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return h.Service.List(ctx, opts)
}

// TestHangingPortsHoldNothingBack: while a look-up of ports hangs, changes
// still reach the page at once and the clock's texts still count.
func TestHangingPortsHoldNothingBack(t *testing.T) {
	svc := &hangingPorts{}
	f := newFixtureWith(t, func(reg *registry.Registry) registry.Service { svc.Service = reg; return svc })
	c, _, err := f.dial(http.Header{"Authorization": {"Bearer " + testToken}})
	require.NoError(t, err)
	columns := c.next(ofType("sessions"))["columns"].([]any)
	require.Eventually(t, func() bool { return svc.looks.Load() > 0 }, generous, 10*time.Millisecond)

	in, err := f.reg.Start(ctxT(t), registry.StartOptions{Command: "sleep 30"})
	require.NoError(t, err)
	started := time.Now()
	m := c.next(sessionState(in.ID, "running"))
	assert.Less(t, time.Since(started), portsWait/2, "a change waited for the look at ports")
	assert.Equal(t, "-", column(t, columns, m, "ports"))
	c.next(func(m map[string]any) bool {
		secs, err := strconv.Atoi(strings.TrimSuffix(column(t, columns, m, "age"), "s"))
		return sessionState(in.ID, "running")(m) && err == nil && secs >= 2
	})
	assert.Equal(t, int32(1), svc.looks.Load(), "one look at a time")

	_, err = f.reg.Kill(ctxT(t), in.ID, registry.KillOptions{Force: true})
	require.NoError(t, err)
	killed := time.Now()
	c.next(sessionState(in.ID, "killed"))
	assert.Less(t, time.Since(killed), portsWait/2, "a change waited for the look at ports")
}
