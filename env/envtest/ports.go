package envtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/shellquote"
)

// The Ports cases serve with `busybox httpd -f` (in the foreground, so a
// port that is taken makes it exit at once) on 127.0.0.1 and a random
// port, retried on another when taken: the cases run in parallel, and
// other programs may hold ports of the sandbox. They run where
// Capabilities.Ports is true; the CheckURL cases where Capabilities.CheckURL
// is; the WaitListening cases where the Process implements env.PortWaiter.
var portCases = []testCase{
	{"TreeChild", func(t *testing.T, s *suite) { s.testTreeListener(t, `%s & wait`) }},
	{"TreeGrandchild", func(t *testing.T, s *suite) { s.testTreeListener(t, `sh -c '%s & wait' & wait`) }},
	{"OutsideTree", testOutsideTree},
	{"TreeListeners", testTreeListeners},
	{"GoneAfterKill", testListenersGoneAfterKill},
	{"Exited", testListenersExited},
	{"CheckURL", testCheckURL},
	{"CheckURLInvalid", testCheckURLInvalid},
	{"WaitListening", testWaitListening},
	{"WaitListeningCancel", testWaitListeningCancel},
}

// portsEnv returns a fresh Environment that has Capabilities.Ports, or
// skips.
func (s *suite) portsEnv(t *testing.T) env.Environment {
	t.Helper()
	e := s.newEnv(t)
	if !e.Capabilities().Ports {
		t.Skip("Capabilities.Ports is false: the backend does not list listening sockets")
	}
	return e
}

// server is a busybox httpd serving a directory with an index.html.
type server struct {
	p    env.Process
	port int
}

// serve starts a tree whose shape (a format with one %s) runs the server
// command somewhere in it, on a free port, and waits until it serves:
// until the tree's Listeners show the port (or, without
// Capabilities.Ports, until CheckURL gets an answer).
func (s *suite) serve(t *testing.T, e env.Environment, shape string) server {
	t.Helper()
	bb := strings.TrimSpace(s.sh(t, e, "command -v busybox || true"))
	if bb == "" {
		t.Skip("the sandbox has no busybox: the Ports cases serve with busybox httpd")
	}
	dir := s.tempDir(t, e)
	s.sh(t, e, "echo ok >"+shellquote.Quote(dir+"/index.html"))
	const attempts = 5
	for range attempts {
		port := 20000 + rand.IntN(40000)
		// The command refers to variables only, so a shape may nest it in
		// single quotes.
		cmd := fmt.Sprintf("BB=%s D=%s P=%d\nexport BB D P\n", shellquote.Quote(bb), shellquote.Quote(dir), port) +
			fmt.Sprintf(shape, `"$BB" httpd -f -p 127.0.0.1:"$P" -h "$D"`)
		p := s.start(t, e, env.Spec{Command: cmd})
		if s.waitServing(t, e, p, port) {
			return server{p: p, port: port}
		}
		t.Logf("port %d is taken; trying another", port)
	}
	t.Fatalf("busybox httpd exited %d times: no free port, or it cannot serve (see the logs)", attempts)
	return server{}
}

// waitServing reports true once p's tree serves on port, false when the
// tree ends first (httpd exits at once when the port is taken).
func (s *suite) waitServing(t *testing.T, e env.Environment, p env.Process, port int) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	exited := make(chan struct{})
	go func() {
		_, _ = p.Wait(ctx)
		close(exited)
	}()
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		if e.Capabilities().Ports {
			ls := s.listeners(t, p)
			if slices.ContainsFunc(ls, func(l env.Listener) bool { return l.Port == port }) {
				return true
			}
		} else if status, err := e.(env.URLChecker).CheckURL(ctx, fmt.Sprintf("http://127.0.0.1:%d/", port)); err == nil && status > 0 {
			return true
		}
		select {
		case <-exited:
			return false
		case <-ctx.Done():
			t.Fatalf("the server on port %d neither listened nor exited within %v", port, s.timeout)
		case <-time.After(delay):
		}
	}
}

// listeners returns p's Listeners, failing the test on an error.
func (s *suite) listeners(t *testing.T, p env.Process) []env.Listener {
	t.Helper()
	pl, ok := p.(env.PortLister)
	if !ok {
		t.Fatalf("Capabilities.Ports is true but the Process (%T) does not implement env.PortLister", p)
	}
	ls, err := pl.Listeners(s.ctx(t))
	if err != nil {
		t.Fatalf("Process.Listeners: %v", err)
	}
	checkSorted(t, ls)
	return ls
}

// envListeners returns the Environment's Listeners.
func (s *suite) envListeners(t *testing.T, e env.Environment) []env.Listener {
	t.Helper()
	pl, ok := e.(env.PortLister)
	if !ok {
		t.Fatalf("Capabilities.Ports is true but the Environment (%T) does not implement env.PortLister", e)
	}
	ls, err := pl.Listeners(s.ctx(t))
	if err != nil {
		t.Fatalf("Environment.Listeners: %v", err)
	}
	checkSorted(t, ls)
	return ls
}

// checkSorted checks PortLister's order: by port, then address, each
// (port, address) once.
func checkSorted(t *testing.T, ls []env.Listener) {
	t.Helper()
	for i := 1; i < len(ls); i++ {
		a, b := ls[i-1], ls[i]
		if a.Port > b.Port || (a.Port == b.Port && a.Addr == b.Addr) {
			t.Errorf("Listeners not sorted by port, or a (port, address) twice: %v then %v", a, b)
		}
	}
}

func findListener(ls []env.Listener, port int) (env.Listener, bool) {
	for _, l := range ls {
		if l.Port == port {
			return l, true
		}
	}
	return env.Listener{}, false
}

// checkHolder checks that l is held by a process of p's tree that runs
// httpd.
func (s *suite) checkHolder(t *testing.T, p env.Process, l env.Listener) {
	t.Helper()
	assert.Equal(t, "127.0.0.1", l.Addr)
	surv, err := p.Survivors(s.ctx(t))
	require.NoError(t, err, "Survivors")
	assert.Contains(t, surv, l.PID, "the holder of port %d is no member %v of the tree", l.Port, surv)
	assert.Contains(t, l.Command, "httpd", "the holder's command")
}

// testTreeListener: a descendant's listener is the tree's.
func (s *suite) testTreeListener(t *testing.T, shape string) {
	e := s.portsEnv(t)
	srv := s.serve(t, e, shape)
	l, ok := findListener(s.listeners(t, srv.p), srv.port)
	require.True(t, ok)
	s.checkHolder(t, srv.p, l)
}

// testOutsideTree: a socket of another tree is not this tree's, while the
// Environment lists both with their holders.
func testOutsideTree(t *testing.T, s *suite) {
	e := s.portsEnv(t)
	a := s.serve(t, e, `%s & wait`)
	b := s.serve(t, e, `%s & wait`)
	ls := s.listeners(t, a.p)
	_, ok := findListener(ls, b.port)
	assert.False(t, ok, "the tree's Listeners %v include port %d of another tree", ls, b.port)

	all := s.envListeners(t, e)
	for _, srv := range []server{a, b} {
		l, ok := findListener(all, srv.port)
		if assert.True(t, ok, "the Environment's Listeners %v lack port %d", all, srv.port) {
			assert.NotZero(t, l.PID, "the holder of port %d", srv.port)
			s.checkHolder(t, srv.p, l)
		}
	}
}

// testTreeListeners: where the Environment implements env.TreePortLister,
// one call gives each tree what its own Listeners give (commands aside),
// and nil for a handle that is not the Environment's.
func testTreeListeners(t *testing.T, s *suite) {
	e := s.portsEnv(t)
	tl, ok := e.(env.TreePortLister)
	if !ok {
		t.Skip("the Environment does not implement env.TreePortLister")
	}
	a := s.serve(t, e, `%s & wait`)
	b := s.serve(t, e, `sh -c '%s & wait' & wait`)
	quiet := s.start(t, e, env.Spec{Command: "sleep 60"})
	trees, err := tl.TreeListeners(s.ctx(t), []env.Process{a.p, foreignProcess{}, b.p, quiet})
	require.NoError(t, err, "TreeListeners")
	require.Len(t, trees, 4)
	for i, p := range []env.Process{a.p, nil, b.p, quiet} {
		if p == nil {
			assert.Nil(t, trees[i], "a handle of another Environment")
			continue
		}
		want := s.listeners(t, p)
		got := trees[i]
		checkSorted(t, got)
		for j := range got {
			got[j].Command = ""
		}
		for j := range want {
			want[j].Command = ""
		}
		assert.Equal(t, want, got, "tree %d: TreeListeners and Process.Listeners disagree", i)
	}
	_, ok = findListener(trees[0], a.port)
	assert.True(t, ok, "tree 0 lacks its port %d: %v", a.port, trees[0])
	_, ok = findListener(trees[2], b.port)
	assert.True(t, ok, "tree 2 lacks its port %d: %v", b.port, trees[2])
	assert.Empty(t, trees[3], "a tree that listens on nothing")
}

// foreignProcess is a Process of no Environment under test.
type foreignProcess struct{ env.Process }

// testListenersGoneAfterKill: a killed tree holds no socket.
func testListenersGoneAfterKill(t *testing.T, s *suite) {
	e := s.portsEnv(t)
	srv := s.serve(t, e, `%s & wait`)
	require.NoError(t, srv.p.Signal(s.ctx(t), env.SIGKILL))
	s.wait(t, srv.p)
	// Killed processes close their sockets as they die: a moment after the
	// leader's status is known.
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		ls := s.listeners(t, srv.p)
		if len(ls) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Listeners still %v %v after the kill", ls, s.timeout)
		case <-time.After(delay):
		}
	}
}

// testListenersExited: a process that ended holds nothing, and asking is
// no error.
func testListenersExited(t *testing.T, s *suite) {
	e := s.portsEnv(t)
	p := s.start(t, e, env.Spec{Command: "exit 3"})
	require.Equal(t, env.Exited(3), s.wait(t, p))
	assert.Empty(t, s.listeners(t, p))
}

// testCheckURL: a served file is a 200, a missing one a 404 (a status, not
// an error), a refused connection an error.
func testCheckURL(t *testing.T, s *suite) {
	e := s.newEnv(t)
	if !e.Capabilities().CheckURL {
		t.Skip("Capabilities.CheckURL is false: the backend makes no HTTP requests")
	}
	c, ok := e.(env.URLChecker)
	require.True(t, ok, "Capabilities.CheckURL is true but the Environment (%T) does not implement env.URLChecker", e)
	srv := s.serve(t, e, `%s & wait`)
	base := "http://127.0.0.1:" + strconv.Itoa(srv.port)

	status, err := c.CheckURL(s.ctx(t), base+"/index.html")
	require.NoError(t, err)
	assert.Equal(t, 200, status)
	status, err = c.CheckURL(s.ctx(t), base+"/missing-"+NewMarker())
	require.NoError(t, err, "a 404 is an answer, not an error")
	assert.Equal(t, 404, status)
	// Port 1 (tcpmux) is privileged and served nowhere nowadays.
	status, err = c.CheckURL(s.ctx(t), "http://127.0.0.1:1/")
	assert.Error(t, err, "a refused connection (status %d)", status)
}

// testCheckURLInvalid: a URL that ValidateCheckURL rejects is rejected
// before any request, with a *env.SpecError.
func testCheckURLInvalid(t *testing.T, s *suite) {
	e := s.newEnv(t)
	if !e.Capabilities().CheckURL {
		t.Skip("Capabilities.CheckURL is false: the backend makes no HTTP requests")
	}
	c, ok := e.(env.URLChecker)
	require.True(t, ok, "Capabilities.CheckURL is true but the Environment (%T) does not implement env.URLChecker", e)
	for _, u := range []string{"", "ftp://127.0.0.1/", "http://127.0.0.1/a b", "http://user:pw@127.0.0.1/", "127.0.0.1:80", "http://-x/"} {
		_, err := c.CheckURL(s.ctx(t), u)
		var se *env.SpecError
		assert.True(t, errors.As(err, &se), "CheckURL(%q) = %v, want a *env.SpecError", u, err)
	}
}

// portWaiter returns p as a PortWaiter, or skips.
func portWaiter(t *testing.T, p env.Process) env.PortWaiter {
	t.Helper()
	w, ok := p.(env.PortWaiter)
	if !ok {
		t.Skipf("the Process (%T) does not implement env.PortWaiter", p)
	}
	return w
}

// testWaitListening: WaitListening returns once the tree listens on one of
// the ports, not before. The tree waits for a gate file, then tries three
// ports in turn (httpd exits at once when its port is taken).
func testWaitListening(t *testing.T, s *suite) {
	e := s.portsEnv(t)
	bb := strings.TrimSpace(s.sh(t, e, "command -v busybox || true"))
	if bb == "" {
		t.Skip("the sandbox has no busybox: the Ports cases serve with busybox httpd")
	}
	dir := s.tempDir(t, e)
	gate := dir + "/go"
	ports := []int{20000 + rand.IntN(13000), 33000 + rand.IntN(13000), 46000 + rand.IntN(14000)}
	script := `G=` + shellquote.Quote(gate) + `
while [ ! -e "$G" ]; do sleep 0.05; done
`
	for i, port := range ports {
		if i > 0 {
			script += " || "
		}
		script += fmt.Sprintf("%s httpd -f -p 127.0.0.1:%d -h %s", shellquote.Quote(bb), port, shellquote.Quote(dir))
	}
	p := s.start(t, e, env.Spec{Command: script})
	w := portWaiter(t, p)

	type result struct {
		ls  []env.Listener
		err error
	}
	done := make(chan result, 1)
	ctx := s.ctx(t)
	go func() {
		ls, err := w.WaitListening(ctx, ports)
		done <- result{ls, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("WaitListening returned %v, %v before the tree could listen", r.ls, r.err)
	default:
	}
	s.sh(t, e, "touch "+shellquote.Quote(gate))
	var r result
	select {
	case r = <-done:
	case <-time.After(s.timeout):
		t.Fatalf("WaitListening did not return within %v of the port opening", s.timeout)
	}
	require.NoError(t, r.err)
	var found bool
	for _, port := range ports {
		if l, ok := findListener(r.ls, port); ok {
			found = true
			s.checkHolder(t, p, l)
		}
	}
	assert.True(t, found, "WaitListening returned %v, without any of the ports %v", r.ls, ports)
}

// testWaitListeningCancel: WaitListening returns ctx.Err() when ctx ends
// while the port stays closed.
func testWaitListeningCancel(t *testing.T, s *suite) {
	e := s.portsEnv(t)
	m := NewMarker()
	s.killMarkedAtCleanup(t, e, m)
	p := s.start(t, e, env.Spec{Command: exportMarkers([]string{m}) + `sleep $M0`})
	w := portWaiter(t, p)
	ctx, cancel := context.WithCancel(s.ctx(t))
	done := make(chan error, 1)
	go func() {
		// Port 1 (tcpmux) is privileged and served nowhere nowadays.
		_, err := w.WaitListening(ctx, []int{1})
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(s.timeout):
		t.Fatalf("WaitListening did not return within %v of its context's end", s.timeout)
	}
}
