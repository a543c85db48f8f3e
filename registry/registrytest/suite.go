// Package registrytest is the suite every registry.Service passes: the
// in-process *registry.Registry and the daemon's client run the same
// tests, so that a front end behaves alike on either. It drives real
// processes through the service's default backend, which must be a POSIX
// shell environment (the suite's callers use env/local).
package registrytest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/registry"
)

// generous bounds every wait for a condition; the suite asserts no timing.
const generous = 30 * time.Second

// Run runs the suite against svc. Each test labels its processes with a
// label of its own, so tests can share svc and run alongside others.
func Run(t *testing.T, svc registry.Service) {
	for _, tc := range []struct {
		name string
		test func(t *testing.T, s suite)
	}{
		{"StartPollLogWait", testStartPollLogWait},
		{"List", testList},
		{"WaitTimeoutAndKill", testWaitTimeoutAndKill},
		{"KillEscalates", testKillEscalates},
		{"KillAll", testKillAll},
		{"Stdin", testStdin},
		{"Resize", testResize},
		{"Remove", testRemove},
		{"Run", testRun},
		{"RunTimeout", testRunTimeout},
		{"RunCancelKills", testRunCancelKills},
		{"Events", testEvents},
		{"EventsSkipReportedExit", testEventsSkipReportedExit},
		{"Errors", testErrors},
		{"NamesAndReadiness", testNamesAndReadiness},
		{"KillPort", testKillPort},
		{"Sessions", testSessions},
		{"Environ", testEnviron},
		{"Stats", testStats},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := suite{svc: svc, label: map[string]string{"registrytest": tc.name + "-" + token()}}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), generous)
				defer cancel()
				if _, err := svc.KillAll(ctx, registry.KillAllOptions{Labels: s.label, Grace: 100 * time.Millisecond}); err != nil {
					t.Errorf("cleanup: kill the test's processes: %v", err)
				}
			})
			tc.test(t, s)
		})
	}
}

type suite struct {
	svc   registry.Service
	label map[string]string
}

func token() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	t.Cleanup(cancel)
	return ctx
}

// start starts command labelled as the test's.
func (s suite) start(t *testing.T, opts registry.StartOptions) registry.Info {
	t.Helper()
	opts.Labels = s.label
	in, err := s.svc.Start(ctxFor(t), opts)
	require.NoError(t, err)
	require.True(t, registry.ValidID(in.ID), "Start returned ID %q", in.ID)
	require.NotEqual(t, registry.StateFailed, in.State, in.Reason)
	return in
}

// output waits for the process to end and returns all of its output.
func (s suite) output(t *testing.T, id string) (registry.Info, string) {
	t.Helper()
	in, err := s.svc.Wait(ctxFor(t), id, 0)
	require.NoError(t, err)
	pr, err := s.svc.Poll(ctxFor(t), id, 0)
	require.NoError(t, err)
	return in, string(pr.Output)
}

// waitOutput waits until the process's output contains want.
func (s suite) waitOutput(t *testing.T, id, want string) {
	t.Helper()
	var last string
	require.Eventually(t, func() bool {
		pr, err := s.svc.Poll(ctxFor(t), id, 0)
		last = string(pr.Output)
		return err == nil && strings.Contains(last, want)
	}, generous, 5*time.Millisecond, "waiting for %q in the output of %s (have %q)", want, id, last)
}

func testStartPollLogWait(t *testing.T, s suite) {
	in := s.start(t, registry.StartOptions{Command: `printf 'one\ntwo\n'; exit 3`})
	got, err := s.svc.Get(ctxFor(t), in.ID[:len("proc_")+6])
	require.NoError(t, err, "Get by a unique prefix")
	assert.Equal(t, in.ID, got.ID)

	end, out := s.output(t, in.ID)
	assert.Equal(t, registry.StateExited, end.State)
	require.NotNil(t, end.Status)
	assert.Equal(t, 3, end.Status.Code)
	assert.Equal(t, "one\ntwo\n", out)

	pr, err := s.svc.Poll(ctxFor(t), in.ID, 4)
	require.NoError(t, err)
	assert.Equal(t, "two\n", string(pr.Output), "Poll from a byte cursor")
	assert.Equal(t, int64(8), pr.Next)

	lr, err := s.svc.Log(ctxFor(t), in.ID, registry.LogOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"one", "two"}, lr.Lines)
	assert.Equal(t, registry.StateExited, lr.State)
	lr, err = s.svc.Log(ctxFor(t), in.ID, registry.LogOptions{Offset: 2, Limit: 1})
	require.NoError(t, err)
	assert.Equal(t, []string{"two"}, lr.Lines)
}

func testList(t *testing.T, s suite) {
	running := s.start(t, registry.StartOptions{Command: "sleep 60"})
	done := s.start(t, registry.StartOptions{Command: "true"})
	_, err := s.svc.WaitTree(ctxFor(t), done.ID, 0)
	require.NoError(t, err)

	ids := func(opts registry.ListOptions) []string {
		t.Helper()
		opts.Labels = s.label
		list, err := s.svc.List(ctxFor(t), opts)
		require.NoError(t, err)
		var out []string
		for _, in := range list {
			out = append(out, in.ID)
		}
		return out
	}
	assert.Equal(t, []string{running.ID}, ids(registry.ListOptions{}), "running only by default")
	assert.Equal(t, []string{running.ID, done.ID}, ids(registry.ListOptions{All: true}), "all, oldest first")
	assert.Equal(t, []string{done.ID}, ids(registry.ListOptions{States: []registry.State{registry.StateExited}}))
	assert.Empty(t, ids(registry.ListOptions{All: true, Backend: "no-such-backend"}))
}

func testWaitTimeoutAndKill(t *testing.T, s suite) {
	in := s.start(t, registry.StartOptions{Command: "sleep 60"})
	got, err := s.svc.Wait(ctxFor(t), in.ID, 50*time.Millisecond)
	require.ErrorIs(t, err, registry.ErrWaitTimeout)
	assert.Equal(t, registry.StateRunning, got.State, "the snapshot of a process still running")

	res, err := s.svc.Kill(ctxFor(t), in.ID, registry.KillOptions{})
	require.NoError(t, err)
	assert.Equal(t, env.SIGTERM, res.Signal)
	assert.False(t, res.Escalated)
	assert.Equal(t, registry.StateKilled, res.State)

	again, err := s.svc.Kill(ctxFor(t), in.ID, registry.KillOptions{})
	require.NoError(t, err)
	assert.True(t, again.AlreadyExited, "a second kill finds it ended")
}

func testKillEscalates(t *testing.T, s suite) {
	in := s.start(t, registry.StartOptions{Command: `trap '' TERM; echo ready; while :; do sleep 0.05; done`})
	s.waitOutput(t, in.ID, "ready")
	res, err := s.svc.Kill(ctxFor(t), in.ID, registry.KillOptions{Grace: 200 * time.Millisecond})
	require.NoError(t, err)
	assert.True(t, res.Escalated, "TERM is ignored: SIGKILL after the grace")
	assert.Equal(t, registry.StateKilled, res.State)
	require.NotNil(t, res.Status)
	assert.Equal(t, env.SIGKILL, res.Status.Signal)
}

func testKillAll(t *testing.T, s suite) {
	a := s.start(t, registry.StartOptions{Command: "sleep 60"})
	b := s.start(t, registry.StartOptions{Command: "sleep 60"})
	res, err := s.svc.KillAll(ctxFor(t), registry.KillAllOptions{Labels: s.label})
	require.NoError(t, err)
	var killed []string
	for _, r := range res {
		killed = append(killed, r.ID)
		assert.Equal(t, registry.StateKilled, r.State)
	}
	assert.ElementsMatch(t, []string{a.ID, b.ID}, killed)
}

func testStdin(t *testing.T, s suite) {
	in := s.start(t, registry.StartOptions{Command: `read a; read b; echo "$a-$b"; cat`, Stdin: true})
	require.NoError(t, s.svc.Write(ctxFor(t), in.ID, []byte("x\n")))
	require.NoError(t, s.svc.Submit(ctxFor(t), in.ID, "y"))
	require.NoError(t, s.svc.Write(ctxFor(t), in.ID, []byte("rest")))
	require.NoError(t, s.svc.CloseStdin(ctxFor(t), in.ID))
	end, out := s.output(t, in.ID)
	assert.Equal(t, registry.StateExited, end.State)
	assert.Equal(t, "x-y\nrest", out)

	err := s.svc.Write(ctxFor(t), in.ID, []byte("late"))
	require.ErrorIs(t, err, registry.ErrNotRunning, "write after exit")
}

func testResize(t *testing.T, s suite) {
	in := s.start(t, registry.StartOptions{Command: `stty size; read _; stty size`, Stdin: true, PTY: &env.WindowSize{Rows: 24, Cols: 80}})
	s.waitOutput(t, in.ID, "24 80")
	require.NoError(t, s.svc.Resize(ctxFor(t), in.ID, env.WindowSize{Rows: 40, Cols: 120}))
	require.NoError(t, s.svc.Submit(ctxFor(t), in.ID, ""))
	_, out := s.output(t, in.ID)
	assert.Contains(t, out, "40 120")

	plain := s.start(t, registry.StartOptions{Command: "sleep 60"})
	err := s.svc.Resize(ctxFor(t), plain.ID, env.WindowSize{Rows: 40, Cols: 120})
	require.ErrorIs(t, err, registry.ErrInvalidOptions, "a process without a terminal")
}

func testRemove(t *testing.T, s suite) {
	running := s.start(t, registry.StartOptions{Command: "sleep 60"})
	require.ErrorIs(t, s.svc.Remove(ctxFor(t), running.ID), registry.ErrRunning)
	require.NoError(t, s.svc.RemoveForce(ctxFor(t), running.ID))
	_, err := s.svc.Get(ctxFor(t), running.ID)
	require.ErrorIs(t, err, registry.ErrNotFound)

	done := s.start(t, registry.StartOptions{Command: "true"})
	_, err = s.svc.WaitTree(ctxFor(t), done.ID, 0)
	require.NoError(t, err)
	require.NoError(t, s.svc.Remove(ctxFor(t), done.ID))
	_, err = s.svc.Get(ctxFor(t), done.ID)
	require.ErrorIs(t, err, registry.ErrNotFound)
}

// syncBuffer is an io.Writer safe to read while Run writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func testRun(t *testing.T, s suite) {
	var live syncBuffer
	started := make(chan registry.Info, 1)
	listed := make(chan []registry.Info, 1)
	submitted := make(chan struct{})
	res, err := s.svc.Run(ctxFor(t), registry.RunOptions{
		StartOptions: registry.StartOptions{Command: `echo first; read _; echo second; exit 4`, Stdin: true, Labels: s.label},
		Output:       &live,
		Started: func(in registry.Info) {
			assert.Empty(t, live.String(), "Started comes before any output")
			started <- in
			// The caller can act on the process while Run blocks.
			go func() {
				defer close(submitted)
				list, err := s.svc.List(ctxFor(t), registry.ListOptions{Labels: s.label})
				assert.NoError(t, err)
				listed <- list
				assert.NoError(t, s.svc.Submit(ctxFor(t), in.ID, "go"))
			}()
		},
	})
	require.NoError(t, err)
	// The process may end, and Run return, before Submit's answer is
	// read: the test (and its contexts) must outlive that call.
	<-submitted
	in := <-started
	assert.Equal(t, in.ID, res.ID)
	assert.Equal(t, registry.StateExited, res.State)
	require.NotNil(t, res.Status)
	assert.Equal(t, 4, res.Status.Code)
	assert.Equal(t, "first\nsecond\n", live.String(), "output streamed live")
	assert.Equal(t, "first\nsecond\n", string(res.Output))
	assert.True(t, res.Foreground)
	seen := <-listed
	require.Len(t, seen, 1, "a foreground process is listed while it runs")
	assert.True(t, seen[0].Foreground)
}

func testRunTimeout(t *testing.T, s suite) {
	res, err := s.svc.Run(ctxFor(t), registry.RunOptions{
		StartOptions: registry.StartOptions{Command: "echo started; sleep 60", Labels: s.label},
		Timeout:      300 * time.Millisecond,
		Grace:        time.Second,
	})
	require.NoError(t, err)
	assert.Equal(t, registry.StateTimedOut, res.State)
	assert.Equal(t, registry.TimedOutTimeout, res.TimedOut)
	assert.Equal(t, "started\n", string(res.Output))
	require.NotNil(t, res.Kill, "the result says how the tree was ended")
	assert.Equal(t, env.SIGTERM, res.Kill.Signal)
}

func testRunCancelKills(t *testing.T, s suite) {
	ctx, cancel := context.WithCancel(ctxFor(t))
	var id string
	res, err := s.svc.Run(ctx, registry.RunOptions{
		StartOptions: registry.StartOptions{Command: "echo up; sleep 60", Labels: s.label},
		Output: writerFunc(func(p []byte) (int, error) {
			if strings.Contains(string(p), "up") {
				cancel()
			}
			return len(p), nil
		}),
		Started: func(in registry.Info) { id = in.ID },
	})
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, id, res.ID)
	assert.Equal(t, registry.StateKilled, res.State, "cancelling Run kills the tree")
	require.NotNil(t, res.Kill)
	got, err := s.svc.Get(ctxFor(t), id)
	require.NoError(t, err)
	assert.True(t, got.State.Final())
	assert.False(t, got.TreeRunning, "nothing of the tree is left")
}

// testSessions: a session's end kills its processes' trees and no other;
// a dropped lease does the same in the background; a start in a session
// that is not open is refused.
func testSessions(t *testing.T, s suite) {
	lease, err := s.svc.OpenSession(ctxFor(t), registry.SessionOptions{})
	require.NoError(t, err)
	require.True(t, registry.ValidSessionID(lease.ID()), "session ID %q", lease.ID())
	member := s.start(t, registry.StartOptions{Command: "sleep 60 & sleep 60; wait", Session: lease.ID()})
	assert.Equal(t, lease.ID(), member.Session)
	outside := s.start(t, registry.StartOptions{Command: "sleep 60"})
	res, err := lease.End(ctxFor(t))
	require.NoError(t, err)
	require.Len(t, res, 1)
	assert.Equal(t, member.ID, res[0].ID)
	assert.Equal(t, registry.StateKilled, res[0].State)
	assert.Empty(t, res[0].Survivors, "End returns once the tree is gone")
	got, err := s.svc.WaitTree(ctxFor(t), member.ID, 0)
	require.NoError(t, err)
	assert.Equal(t, registry.StateKilled, got.State)
	got, err = s.svc.Get(ctxFor(t), outside.ID)
	require.NoError(t, err)
	assert.Equal(t, registry.StateRunning, got.State, "a process outside the session")
	_, err = s.svc.Start(ctxFor(t), registry.StartOptions{Command: "true", Session: lease.ID(), Labels: s.label})
	require.ErrorIs(t, err, registry.ErrInvalidOptions, "a start in an ended session")

	dropped, err := s.svc.OpenSession(ctxFor(t), registry.SessionOptions{})
	require.NoError(t, err)
	orphan := s.start(t, registry.StartOptions{Command: "sleep 60", Session: dropped.ID()})
	dropped.Drop()
	require.Eventually(t, func() bool {
		got, err := s.svc.Get(ctxFor(t), orphan.ID)
		return err == nil && got.State == registry.StateKilled && !got.TreeRunning && got.Reason != ""
	}, generous, 5*time.Millisecond, "the dropped session's process was not killed")
}

// testEnviron: the caller's environment is the command's whole base
// environment on the suite's (local) backend, with Env on top.
func testEnviron(t *testing.T, s suite) {
	in := s.start(t, registry.StartOptions{Command: `printf '%s|%s|%s\n' "${ONLY_CALLER-unset}" "${OVERRIDDEN-unset}" "${HOME-unset}"`,
		Environ: []string{"ONLY_CALLER=c", "OVERRIDDEN=caller", "PATH=/usr/bin:/bin"}, Env: []string{"OVERRIDDEN=env"}})
	_, out := s.output(t, in.ID)
	assert.Equal(t, "c|env|unset\n", out, "Environ is the whole base: nothing of the supervisor's (HOME) is added")
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func testEvents(t *testing.T, s suite) {
	events, err := s.svc.Events(ctxFor(t))
	require.NoError(t, err)
	defer events.Close()
	in := s.start(t, registry.StartOptions{Command: "echo bye; exit 2", Notify: true})
	for {
		ev, err := events.Next(ctxFor(t))
		require.NoError(t, err)
		if ev.ID != in.ID || ev.Type != registry.EventExited {
			continue
		}
		assert.True(t, ev.Notify)
		assert.Equal(t, registry.StateExited, ev.State)
		require.NotNil(t, ev.Status)
		assert.Equal(t, 2, ev.Status.Code)
		assert.Equal(t, "bye", ev.Tail)
		break
	}
	events.Close()
	_, err = events.Next(ctxFor(t))
	require.ErrorIs(t, err, registry.ErrClosed, "Next after Close")
}

// An exit whose result a caller received after the event was published,
// but before the subscriber took it, is not handed over: the subscriber
// would announce an end the agent already knows.
func testEventsSkipReportedExit(t *testing.T, s suite) {
	events, err := s.svc.Events(ctxFor(t))
	require.NoError(t, err)
	defer events.Close()
	// Notify exempts the exits from the global event rate limit, which
	// would otherwise be free to drop them and pass the test.
	reported := s.start(t, registry.StartOptions{Command: "exit 0", Notify: true})
	require.Eventually(t, func() bool {
		in, err := s.svc.Get(ctxFor(t), reported.ID)
		return err == nil && in.State.Final()
	}, generous, 5*time.Millisecond, "waiting for %s to end", reported.ID)
	in, err := s.svc.Get(ctxFor(t), reported.ID)
	require.NoError(t, err)
	assert.False(t, in.ResultReported, "Get reports the result as received")
	in, err = s.svc.Wait(ctxFor(t), reported.ID, 0)
	require.NoError(t, err)
	require.True(t, in.State.Final())
	in, err = s.svc.Get(ctxFor(t), reported.ID)
	require.NoError(t, err)
	assert.True(t, in.ResultReported, "after Wait returned the end")

	marker := s.start(t, registry.StartOptions{Command: "exit 0", Notify: true})
	for {
		ev, err := events.Next(ctxFor(t))
		require.NoError(t, err)
		if ev.Type != registry.EventExited {
			continue
		}
		require.NotEqual(t, reported.ID, ev.ID, "the exit of %s was handed over after Wait reported it", reported.ID)
		if ev.ID == marker.ID {
			break
		}
	}
}

func testErrors(t *testing.T, s suite) {
	_, err := s.svc.Get(ctxFor(t), "proc_000000000000")
	require.ErrorIs(t, err, registry.ErrNotFound)
	_, err = s.svc.Get(ctxFor(t), "zz")
	require.ErrorIs(t, err, registry.ErrInvalidID)
	_, err = s.svc.Kill(ctxFor(t), "proc_000000000000", registry.KillOptions{})
	require.ErrorIs(t, err, registry.ErrNotFound)
	_, err = s.svc.Kill(ctxFor(t), "proc_000000000000", registry.KillOptions{Signal: "BOGUS"})
	require.Error(t, err)
	_, err = s.svc.Log(ctxFor(t), "proc_000000000000", registry.LogOptions{})
	require.ErrorIs(t, err, registry.ErrNotFound)
	_, err = s.svc.Run(ctxFor(t), registry.RunOptions{StartOptions: registry.StartOptions{Command: "true", Labels: s.label}, Timeout: -time.Second})
	require.ErrorIs(t, err, registry.ErrInvalidOptions)
}

// A dev server: a name, readiness by port and URL (a real listener), the
// name resolving like an ID, reuse and refusal, its port in Ports and
// List, and the crash of a ready process.
func testNamesAndReadiness(t *testing.T, s suite) {
	if _, err := exec.LookPath("busybox"); err != nil {
		t.Skip("busybox (its httpd is the server of this test) is not installed")
	}
	site := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(site, "index.html"), []byte("hi\n"), 0o644))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	name := "rt-" + token()
	server := fmt.Sprintf("exec busybox httpd -f -p 127.0.0.1:%d -h .", port)
	opts := registry.StartOptions{Name: name, Command: server, Dir: site, Labels: s.label,
		Ready: &registry.ReadyOptions{Port: port, URL: fmt.Sprintf("http://127.0.0.1:%d/", port)}}
	in, err := s.svc.Start(ctxFor(t), opts)
	if errors.Is(err, registry.ErrInvalidOptions) && strings.Contains(err.Error(), "cannot see which ports") {
		// Refused before anything started: this platform's local backend
		// cannot see sockets.
		t.Skipf("the backend cannot check readiness by port: %v", err)
	}
	require.NoError(t, err)
	assert.Equal(t, name, in.Name)

	ready, err := s.svc.WaitReady(ctxFor(t), name, generous)
	require.NoError(t, err, "WaitReady by name")
	assert.Equal(t, in.ID, ready.ID)
	assert.False(t, ready.ReadyAt.IsZero())

	again := s.start(t, registry.StartOptions{Name: name, Command: server, Dir: site,
		Ready: &registry.ReadyOptions{Port: port, URL: fmt.Sprintf("http://127.0.0.1:%d/", port)}})
	assert.True(t, again.Reused)
	assert.Equal(t, in.ID, again.ID)
	_, err = s.svc.Start(ctxFor(t), registry.StartOptions{Name: name, Command: "sleep 60", Labels: s.label})
	require.ErrorIs(t, err, registry.ErrNameInUse)
	assert.Contains(t, err.Error(), in.ID)

	ports, err := s.svc.Ports(ctxFor(t), "")
	require.NoError(t, err)
	var owner registry.PortInfo
	for _, p := range ports {
		if p.Port == port {
			owner = p
		}
	}
	assert.Equal(t, in.ID, owner.ID, "the server's socket is owned by its process (%+v)", ports)
	assert.Equal(t, name, owner.Name)
	list, err := s.svc.List(ctxFor(t), registry.ListOptions{Labels: s.label, Ports: true})
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, []int{port}, list[0].Ports)

	res, err := s.svc.Kill(ctxFor(t), name, registry.KillOptions{})
	require.NoError(t, err)
	assert.Equal(t, registry.StateKilled, res.State)

	// Ending before it is ready answers the wait, without an error.
	early := s.start(t, registry.StartOptions{Command: "echo no luck; exit 3", Ready: &registry.ReadyOptions{Pattern: "never"}})
	end, err := s.svc.WaitReady(ctxFor(t), early.ID, generous)
	require.NoError(t, err)
	assert.True(t, end.ReadyAt.IsZero())
	assert.Equal(t, registry.StateExited, end.State)
	_, err = s.svc.WaitReady(ctxFor(t), early.ID, generous)
	require.NoError(t, err)

	// A ready process that ends on its own crashed.
	events, err := s.svc.Events(ctxFor(t))
	require.NoError(t, err)
	defer events.Close()
	crash := s.start(t, registry.StartOptions{Command: "echo up; read _; echo down; exit 4", Stdin: true,
		Ready: &registry.ReadyOptions{Pattern: "^up$"}})
	_, err = s.svc.WaitReady(ctxFor(t), crash.ID, generous)
	require.NoError(t, err)
	require.NoError(t, s.svc.CloseStdin(ctxFor(t), crash.ID))
	for {
		ev, err := events.Next(ctxFor(t))
		require.NoError(t, err)
		if ev.ID != crash.ID || ev.Type != registry.EventCrashed {
			continue
		}
		require.NotNil(t, ev.Status)
		assert.Equal(t, 4, ev.Status.Code)
		assert.Equal(t, "up\ndown", ev.Tail)
		break
	}
}

// testKillPort: KillPort kills the corral tree that listens on a port,
// leaves a program corral did not start alone and reports it, finds
// nothing on a free port, and refuses a bad port or contradicting options
// before it looks.
func testKillPort(t *testing.T, s suite) {
	_, err := s.svc.KillPort(ctxFor(t), "", 0, registry.KillOptions{})
	require.ErrorIs(t, err, registry.ErrInvalidOptions)
	_, err = s.svc.KillPort(ctxFor(t), "", 8080, registry.KillOptions{Force: true, Escalate: new(false)})
	require.ErrorIs(t, err, registry.ErrInvalidOptions)

	// A socket of this test's own process: corral did not start it.
	foreign, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer foreign.Close()
	fport := foreign.Addr().(*net.TCPAddr).Port
	res, err := s.svc.KillPort(ctxFor(t), "", fport, registry.KillOptions{})
	if errors.Is(err, env.ErrUnsupported) {
		t.Skipf("the backend cannot see sockets: %v", err)
	}
	require.NoError(t, err)
	assert.Equal(t, fport, res.Port)
	assert.Empty(t, res.Killed)
	require.Len(t, res.Foreign, 1, "%+v", res)
	assert.Equal(t, os.Getpid(), res.Foreign[0].PID)
	assert.Empty(t, res.Foreign[0].ID)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	res, err = s.svc.KillPort(ctxFor(t), "", port, registry.KillOptions{})
	require.NoError(t, err, "nothing listening is no error")
	assert.Empty(t, res.Killed)
	assert.Empty(t, res.Foreign)

	server := ""
	switch {
	case lookPath("busybox"):
		server = fmt.Sprintf("exec busybox httpd -f -p 127.0.0.1:%d -h %s", port, t.TempDir())
	case lookPath("python3"):
		server = fmt.Sprintf("exec python3 -m http.server --bind 127.0.0.1 %d", port)
	default:
		t.Skip("needs busybox or python3 for a server that listens")
	}
	in := s.start(t, registry.StartOptions{Command: server, Ready: &registry.ReadyOptions{Port: port}})
	ready, err := s.svc.WaitReady(ctxFor(t), in.ID, generous)
	require.NoError(t, err)
	require.False(t, ready.ReadyAt.IsZero(), "the server never listened: %+v", ready)
	res, err = s.svc.KillPort(ctxFor(t), "", port, registry.KillOptions{})
	require.NoError(t, err)
	require.Len(t, res.Killed, 1, "%+v", res)
	assert.Equal(t, in.ID, res.Killed[0].ID)
	assert.Equal(t, registry.StateKilled, res.Killed[0].State)
	assert.Empty(t, res.Foreign)
	got, err := s.svc.Get(ctxFor(t), in.ID)
	require.NoError(t, err)
	assert.Equal(t, registry.StateKilled, got.State)
}

func lookPath(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

// testStats: a running tree's cost comes back through Stats and Info
// alike, or, from a backend that cannot measure, a one-line reason and no
// figures; a finished tree is no longer live; an unknown ID is the
// registry's error either way.
func testStats(t *testing.T, s suite) {
	in := s.start(t, registry.StartOptions{Command: "sleep 60"})
	var (
		rep    registry.StatsReport
		repErr error
	)
	require.Eventually(t, func() bool {
		rep, repErr = s.svc.Stats(ctxFor(t), in.ID)
		return repErr != nil || rep.Stats != nil || rep.Unsupported != ""
	}, generous, 20*time.Millisecond, "neither figures nor a reason for %s", in.ID)
	require.NoError(t, repErr)
	assert.Equal(t, in.ID, rep.ID)
	got, err := s.svc.Get(ctxFor(t), in.ID)
	require.NoError(t, err)
	if rep.Unsupported != "" {
		assert.Contains(t, rep.Unsupported, "cannot measure")
		assert.Nil(t, rep.Stats)
		assert.Empty(t, rep.History)
		assert.Nil(t, got.Stats, "Info.Stats without figures")
	} else {
		assert.GreaterOrEqual(t, rep.Stats.Pids, 1, "the sleep is alive")
		assert.Positive(t, rep.Stats.RSSBytes)
		assert.GreaterOrEqual(t, rep.Stats.PeakRSSBytes, rep.Stats.RSSBytes)
		assert.False(t, rep.Stats.SampledAt.IsZero())
		assert.NotEmpty(t, rep.History)
		if assert.NotNil(t, got.Stats, "Info.Stats from the last sample") {
			assert.Positive(t, got.Stats.RSSBytes)
		}
	}
	_, err = s.svc.Kill(ctxFor(t), in.ID, registry.KillOptions{})
	require.NoError(t, err)
	_, err = s.svc.WaitTree(ctxFor(t), in.ID, 0)
	require.NoError(t, err)
	rep, err = s.svc.Stats(ctxFor(t), in.ID)
	require.NoError(t, err)
	if rep.Stats != nil {
		assert.Zero(t, rep.Stats.Pids, "a finished tree has nothing live")
		assert.Zero(t, rep.Stats.RSSBytes)
	}

	_, err = s.svc.Stats(ctxFor(t), "proc_000000000000")
	require.ErrorIs(t, err, registry.ErrNotFound)
	_, err = s.svc.Stats(ctxFor(t), "zz")
	require.ErrorIs(t, err, registry.ErrInvalidID)
}
