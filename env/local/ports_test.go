package local

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

func TestCheckURL(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/missing", http.StatusFound)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	e := newTestEnvIn(t, testTempDir(t), true)
	ctx := context.Background()

	for path, want := range map[string]int{"/ok": 200, "/missing": 404, "/moved": 302} {
		got, err := e.CheckURL(ctx, srv.URL+path)
		require.NoError(t, err, path)
		assert.Equal(t, want, got, "%s: a redirect is not followed, a 404 is a status", path)
	}

	// A refused connection is an error.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := l.Addr().String()
	l.Close()
	_, err = e.CheckURL(ctx, "http://"+closed+"/")
	assert.Error(t, err)

	// An invalid URL is refused before any request.
	_, err = e.CheckURL(ctx, "ftp://127.0.0.1/")
	var se *env.SpecError
	assert.True(t, errors.As(err, &se), "error %v is no SpecError", err)

	// A cancelled context ends the request.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = e.CheckURL(cctx, srv.URL+"/ok")
	assert.ErrorIs(t, err, context.Canceled)
}

// TestCheckURLIgnoresProxy: a proxy from the environment would answer for
// a server local to the sandbox.
func TestCheckURLIgnoresProxy(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	defer srv.Close()
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	t.Setenv("http_proxy", "http://127.0.0.1:1")
	t.Setenv("NO_PROXY", "")
	e := newTestEnvIn(t, testTempDir(t), true)
	got, err := e.CheckURL(context.Background(), srv.URL)
	require.NoError(t, err)
	assert.Equal(t, http.StatusTeapot, got)
}

func TestListenersOf(t *testing.T) {
	a := netip.MustParseAddr
	got := listenersOf([]socketHolder{
		{port: 8080, addr: a("::"), pid: 0},
		{port: 8080, addr: a("::"), pid: 30},
		{port: 8080, addr: a("::"), pid: 20},
		{port: 8080, addr: a("0.0.0.0"), pid: 0},
		{port: 22, addr: a("127.0.0.1"), pid: 20},
	}, func(pid int) string { return map[int]string{20: "srv -p 8080"}[pid] })
	assert.Equal(t, []env.Listener{
		{Port: 22, Addr: "127.0.0.1", PID: 20, Command: "srv -p 8080"},
		{Port: 8080, Addr: "0.0.0.0"},
		{Port: 8080, Addr: "::", PID: 20, Command: "srv -p 8080"},
	}, got)
	assert.Nil(t, listenersOf(nil, nil))
}
