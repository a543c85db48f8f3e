package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/registry"
)

// raw sends one request with a literal JSON body over the socket and
// returns the status and the body of the answer.
func raw(t *testing.T, socket, method, path, body string) (int, []byte) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://corral"+APIVersion+path, rd)
	require.NoError(t, err)
	resp, err := hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// TestDurationsOnTheWire: every duration field of the API reads a number
// as seconds and a string as a Go duration; anything else is a 400 with a
// short message. "ttl": 3600 was read as 3600 ns, which killed the process
// at once.
func TestDurationsOnTheWire(t *testing.T) {
	c, paths := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()

	for _, ttl := range []string{`3600`, `"1h"`, `"3600"`, `3600.0`} {
		status, b := raw(t, paths.Socket, "POST", "/processes", `{"command":"sleep 60","labels":{"t":"dur"},"ttl":`+ttl+`,"idle_timeout":1800}`)
		require.Equal(t, http.StatusCreated, status, "ttl %s: %s", ttl, b)
		var in registry.Info
		require.NoError(t, json.Unmarshal(b, &in))
		assert.Equal(t, time.Hour, in.TTL.D(), "ttl %s", ttl)
		assert.Equal(t, 30*time.Minute, in.IdleTimeout.D(), "ttl %s", ttl)
		assert.Equal(t, registry.StateRunning, in.State, "ttl %s", ttl)
		assert.WithinDuration(t, in.StartedAt.Add(time.Hour), in.ExpiresAt, time.Second)
	}

	bad := []string{`true`, `false`, `-1`, `"-5s"`, `{}`, `{"seconds":5}`, `[5]`, `"soon"`, `"` + strings.Repeat("9x", 5000) + `"`}
	for _, v := range bad {
		for _, req := range []struct{ path, body string }{
			{"/processes", `{"command":"true","ttl":` + v + `}`},
			{"/processes", `{"command":"true","idle_timeout":` + v + `}`},
			{"/run", `{"command":"true","timeout":` + v + `}`},
			{"/run", `{"command":"true","idle_timeout":` + v + `}`},
			{"/run", `{"command":"true","yield_after":` + v + `}`},
			{"/run", `{"command":"true","grace":` + v + `}`},
			{"/processes/proc_000000000000/kill", `{"grace":` + v + `}`},
			{"/kill", `{"labels":{"t":"none"},"grace":` + v + `}`},
		} {
			status, b := raw(t, paths.Socket, "POST", req.path, req.body)
			var eb ErrorBody
			require.NoError(t, json.Unmarshal(b, &eb), "%s %.60s: %s", req.path, req.body, b)
			assert.Equal(t, http.StatusBadRequest, status, "%s %.60s: %s", req.path, req.body, b)
			assert.Equal(t, CodeInvalid, eb.Code, "%s %.60s", req.path, req.body)
			assert.Contains(t, eb.Error, "give seconds", "%s %.60s", req.path, req.body)
			field, _, _ := strings.Cut(strings.TrimPrefix(req.body[strings.LastIndex(req.body, `,"`)+1:], `{`), `":`)
			assert.Contains(t, eb.Error, strings.Trim(field, `"`)+": duration ", "%s %.60s: the error names the field", req.path, req.body)
			assert.LessOrEqual(t, len(eb.Error), 200, "%s: the error repeats its input: %.100q", req.path, eb.Error)
		}
	}
	list, err := c.List(ctx, registry.ListOptions{All: true})
	require.NoError(t, err)
	assert.Len(t, list, 4, "a request with a bad duration started something")

	// Run: a numeric timeout is seconds (as nanoseconds, 1 would have
	// killed it at once; as an error, it would not have run).
	status, b := raw(t, paths.Socket, "POST", "/run", `{"command":"echo ran; sleep 30","timeout":1,"grace":0.2}`)
	require.Equal(t, http.StatusOK, status, "%s", b)
	end := lastEvent[RunEnd](t, b, "end")
	assert.Equal(t, registry.StateTimedOut, end.State)
	assert.Equal(t, "timeout", end.TimedOut)
	assert.Contains(t, string(b), "ran")

	// Wait's timeout query parameter: "1" is a second, like "1s".
	for _, q := range []string{"1", "1s", "0.5"} {
		status, b := raw(t, paths.Socket, "POST", "/processes/"+list[0].ID+"/wait?timeout="+q, "")
		require.Equal(t, http.StatusOK, status, "%s", b)
		var wr WaitResponse
		require.NoError(t, json.Unmarshal(b, &wr))
		assert.True(t, wr.TimedOut, "timeout=%s", q)
	}
	status, b = raw(t, paths.Socket, "POST", "/processes/"+list[0].ID+"/wait?timeout=-1", "")
	assert.Equal(t, http.StatusBadRequest, status, "%s", b)

	// Kill's grace as a number.
	status, b = raw(t, paths.Socket, "POST", "/processes/"+list[0].ID+"/kill", `{"grace":0.5}`)
	require.Equal(t, http.StatusOK, status, "%s", b)
	status, b = raw(t, paths.Socket, "POST", "/kill", `{"labels":{"t":"dur"},"grace":1}`)
	require.Equal(t, http.StatusOK, status, "%s", b)
}

// lastEvent returns the data of the last SSE event named name in b.
func lastEvent[T any](t *testing.T, b []byte, name string) T {
	t.Helper()
	var v T
	found := false
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(nil, 1<<20)
	ev := ""
	for sc.Scan() {
		line := sc.Text()
		if e, ok := strings.CutPrefix(line, "event: "); ok {
			ev = e
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok && ev == name {
			require.NoError(t, json.Unmarshal([]byte(d), &v))
			found = true
		}
	}
	require.True(t, found, "no %q event in %q", name, b)
	return v
}

// TestBodyThatNeverEndsIsCut: a request whose body never finishes is
// answered 400 and its connection closed within the body timeout; the
// deadline is lifted once a body is read, so a run that streams for longer
// than it, and the output and event streams, are not cut.
func TestBodyThatNeverEndsIsCut(t *testing.T) {
	const timeout = 300 * time.Millisecond
	c, paths := startDaemonWith(t, func(cfg *Config) { cfg.BodyTimeout = timeout })
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()

	for _, path := range []string{"/processes", "/run", "/kill", "/processes/proc_000000000000/stdin", "/shutdown"} {
		conn, err := net.Dial("unix", paths.Socket)
		require.NoError(t, err)
		start := time.Now()
		_, err = io.WriteString(conn, "POST "+APIVersion+path+" HTTP/1.1\r\nHost: corral\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"command\":")
		require.NoError(t, err)
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(generous)))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err, path)
		b, _ := io.ReadAll(resp.Body)
		took := time.Since(start)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", path, b)
		assert.Contains(t, string(b), "send the whole body at once", path)
		assert.GreaterOrEqual(t, took, timeout, path)
		// The connection is closed: nothing more can be read.
		_, err = conn.Read(make([]byte, 1))
		assert.Error(t, err, "%s: the connection stayed open", path)
		conn.Close()
	}
	list, err := c.List(ctx, registry.ListOptions{All: true})
	require.NoError(t, err)
	assert.Empty(t, list, "an unfinished body started something")

	// A run that outlives the body timeout several times streams to its
	// end: the lifted deadline does not end its lease.
	status, b := raw(t, paths.Socket, "POST", "/run", `{"command":"echo early; sleep 1; echo late"}`)
	require.Equal(t, http.StatusOK, status)
	end := lastEvent[RunEnd](t, b, "end")
	assert.Equal(t, registry.StateExited, end.State, "%s", b)
	assert.Contains(t, string(b), "late")

	// A follow of the output, started with a (small) body-less request,
	// outlives it too.
	in, err := c.Start(ctx, registry.StartOptions{Command: "sleep 1; echo done"})
	require.NoError(t, err)
	var got strings.Builder
	fin, err := c.Follow(ctx, in.ID, 0, func(ch OutputChunk) error { got.Write(ch.Data); return nil })
	require.NoError(t, err)
	assert.Equal(t, registry.StateExited, fin.State)
	assert.Equal(t, "done\n", got.String())
}
