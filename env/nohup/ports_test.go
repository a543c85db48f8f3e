package nohup_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup/nohuptest"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestPorts runs the port calls on this machine under each shell: a wait
// that ends when the tree listens, the tree's listeners, the machine's,
// and a wait cancelled part way, which ends its loop inside the sandbox.
func TestPorts(t *testing.T) {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("busybox not found (its nc listens in these tests): apt-get install busybox-static")
	}
	forShells(t, func(t *testing.T, sh nohuptest.Shell) {
		e, _ := newEnv(t, sh)
		ctx := testCtx(t)
		port := freePort(t)
		p := start(t, e, env.Spec{Command: "sleep 0.2; exec " + bb + " nc -l -p " + strconv.Itoa(port)})
		ls, err := p.(env.PortWaiter).WaitListening(ctx, []int{port})
		require.NoError(t, err)
		require.Len(t, ls, 1)
		assert.Equal(t, port, ls[0].Port)
		assert.Equal(t, p.PID(), ls[0].PID)
		assert.Contains(t, ls[0].Command, "nc -l -p "+strconv.Itoa(port))

		ls, err = p.(env.PortLister).Listeners(ctx)
		require.NoError(t, err)
		require.Len(t, ls, 1)
		assert.Equal(t, port, ls[0].Port)

		all, err := e.Listeners(ctx)
		require.NoError(t, err)
		assert.Contains(t, all, ls[0])

		// A wait for a port nobody opens, cancelled: it returns ctx's
		// error at once and its loop inside the sandbox ends.
		other := freePort(t)
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := p.(env.PortWaiter).WaitListening(wctx, []int{other})
			done <- err
		}()
		var ref struct {
			Dir string `json:"dir"`
		}
		r, err := p.Ref()
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(r.Data, &ref))
		follows := func() []string {
			m, _ := filepath.Glob(filepath.Join(ref.Dir, "follow-*"))
			return m
		}
		require.Eventually(t, func() bool { return len(follows()) > 0 }, 10*time.Second, 5*time.Millisecond, "the wait runs inside the sandbox")
		cancel()
		select {
		case err := <-done:
			require.ErrorIs(t, err, context.Canceled)
		case <-time.After(5 * time.Second):
			require.FailNow(t, "WaitListening did not return after its ctx was cancelled")
		}
		require.Eventually(t, func() bool { return len(follows()) == 0 }, 10*time.Second, 10*time.Millisecond, "the wait's loop ended: %v", follows())
	})
}

// TestCheckURL: the status of one request, redirects not followed (busybox
// wget follows them, but its first answer's status is the one reported),
// a refused connection an error. A sandbox without any HTTP client (a PATH
// with none) gives ErrUnsupported and turns Capabilities.CheckURL off.
func TestCheckURL(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			w.WriteHeader(http.StatusNoContent)
		case "/moved":
			http.Redirect(w, r, "/", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	forShells(t, func(t *testing.T, sh nohuptest.Shell) {
		e, _ := newEnv(t, sh)
		ctx := testCtx(t)
		require.True(t, e.Capabilities().CheckURL)
		for path, want := range map[string]int{"/": 204, "/moved": 302, "/nope": 404} {
			code, err := e.CheckURL(ctx, srv.URL+path)
			require.NoError(t, err, path)
			assert.Equal(t, want, code, path)
		}
		_, err := e.CheckURL(ctx, "http://127.0.0.1:"+strconv.Itoa(freePort(t))+"/")
		require.Error(t, err)
		var se *env.SpecError
		_, err = e.CheckURL(ctx, "file:///etc/passwd")
		require.ErrorAs(t, err, &se)
	})
	t.Run("no-client", func(t *testing.T) {
		e, _ := newEnv(t, nohuptest.Shell{Name: "sh", Path: "/bin/sh", Env: []string{"PATH=" + t.TempDir()}})
		_, err := e.CheckURL(testCtx(t), srv.URL)
		require.ErrorIs(t, err, env.ErrUnsupported)
		assert.ErrorContains(t, err, "install curl")
		assert.False(t, e.Capabilities().CheckURL)
	})
}
