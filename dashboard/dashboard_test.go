package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
	"github.com/corralhq/corral/internal/proctest"
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
	dir := t.TempDir()
	reg, err := registry.New(registry.Config{
		Open: func(ctx context.Context, target string) (env.Environment, error) {
			return local.New(local.Options{StateDir: dir, Logger: slog.New(slog.DiscardHandler)})
		},
		DefaultGrace: 300 * time.Millisecond,
		Logger:       slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	d, err := New(Config{Registry: reg, Token: testToken, Logger: slog.New(slog.DiscardHandler)})
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
				c.t.Fatalf("connection ended: %v", <-c.done)
			}
			if match(m) {
				return m
			}
		case <-timeout:
			c.t.Fatal("no matching message")
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
// (internal/proctest).
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
		t.Fatal("the connection stayed open")
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
