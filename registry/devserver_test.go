package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
)

// portsEnv is the Fake with sockets: the test says which ports each
// process's tree listens on and which a program outside any tree holds
// (foreign), and what a URL check answers. Its processes implement
// env.PortLister, and env.PortWaiter too when waiter is set. Close leaves
// the Fake's processes alone, so that a second registry can re-attach
// them.
type portsEnv struct {
	*envtest.Fake
	waiter, noPorts, noURL bool

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced at every change
	tree      map[int][]env.Listener
	foreign   []env.Listener
	urlStatus int

	looks     atomic.Int64 // Listeners calls on processes
	urlChecks atomic.Int64
}

func newPortsEnv() *portsEnv {
	return &portsEnv{Fake: newFakeEnv(), changed: make(chan struct{}), tree: map[int][]env.Listener{}}
}

func (e *portsEnv) Capabilities() env.Capabilities {
	c := e.Fake.Capabilities()
	c.Ports, c.CheckURL = !e.noPorts, !e.noURL
	return c
}

func (e *portsEnv) Close() error { return nil }

func (e *portsEnv) wrap(h env.Process, err error) (env.Process, error) {
	if err != nil {
		return nil, err
	}
	p := &portsProc{Process: h, e: e}
	if e.waiter {
		return &waitingProc{p}, nil
	}
	return p, nil
}

func (e *portsEnv) Start(ctx context.Context, spec env.Spec) (env.Process, error) {
	return e.wrap(e.Fake.Start(ctx, spec))
}

func (e *portsEnv) Attach(ctx context.Context, ref env.Ref) (env.Process, error) {
	return e.wrap(e.Fake.Attach(ctx, ref))
}

// listen makes the tree of the process with that PID listen on port.
func (e *portsEnv) listen(pid, port int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.tree[pid] = append(e.tree[pid], env.Listener{Port: port, Addr: "127.0.0.1", PID: pid, Command: "server"})
	close(e.changed)
	e.changed = make(chan struct{})
}

func (e *portsEnv) listenForeign(port int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.foreign = append(e.foreign, env.Listener{Port: port, Addr: "0.0.0.0", PID: 99, Command: "nginx"})
}

func (e *portsEnv) setURLStatus(code int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.urlStatus = code
}

// Listeners of the sandbox: every tree's and the foreign ones.
func (e *portsEnv) Listeners(ctx context.Context) ([]env.Listener, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	all := slices.Clone(e.foreign)
	for _, ls := range e.tree {
		all = append(all, ls...)
	}
	slices.SortFunc(all, func(a, b env.Listener) int { return a.Port - b.Port })
	return all, nil
}

func (e *portsEnv) CheckURL(ctx context.Context, rawURL string) (int, error) {
	e.urlChecks.Add(1)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.urlStatus == 0 {
		return 0, errors.New("connection refused")
	}
	return e.urlStatus, nil
}

type portsProc struct {
	env.Process
	e *portsEnv
}

// Listeners of the process's tree only: a foreign listener never counts.
func (p *portsProc) Listeners(ctx context.Context) ([]env.Listener, error) {
	p.e.looks.Add(1)
	p.e.mu.Lock()
	defer p.e.mu.Unlock()
	return slices.Clone(p.e.tree[p.PID()]), nil
}

type waitingProc struct{ *portsProc }

func (p *waitingProc) WaitListening(ctx context.Context, ports []int) ([]env.Listener, error) {
	for {
		p.e.mu.Lock()
		ls := slices.Clone(p.e.tree[p.PID()])
		ch := p.e.changed
		p.e.mu.Unlock()
		for _, l := range ls {
			if slices.Contains(ports, l.Port) {
				return ls, nil
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

var (
	_ env.PortLister = (*portsEnv)(nil)
	_ env.URLChecker = (*portsEnv)(nil)
	_ env.PortWaiter = (*waitingProc)(nil)
)

// devFixture is a registry on a portsEnv.
type devFixture struct {
	t  *testing.T
	r  *Registry
	pe *portsEnv
}

func newDevFixture(t *testing.T, pe *portsEnv, mod func(*Config)) *devFixture {
	t.Helper()
	if pe == nil {
		pe = newPortsEnv()
	}
	cfg := Config{
		Open:         func(context.Context, string) (env.Environment, error) { return pe, nil },
		DefaultGrace: 50 * time.Millisecond,
		Logger:       slog.New(slog.DiscardHandler),
	}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, r.Close()) })
	return &devFixture{t: t, r: r, pe: pe}
}

func (f *devFixture) start(opts StartOptions) (Info, *envtest.FakeProcess) {
	f.t.Helper()
	if opts.Command == "" {
		opts.Command = "npm run dev"
	}
	in, err := f.r.Start(f.t.Context(), opts)
	require.NoError(f.t, err)
	return in, f.pe.Last()
}

func (f *devFixture) ready(id string) bool {
	in, err := f.r.Get(f.t.Context(), id)
	require.NoError(f.t, err)
	return !in.ReadyAt.IsZero()
}

// nextOf returns the next event of type typ about id.
func nextOf(t *testing.T, sub *Subscription, typ EventType, id string) Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	for {
		ev, err := sub.Next(ctx)
		require.NoError(t, err, "waiting for a %s event of %s", typ, id)
		if ev.Type == typ && ev.ID == id {
			return ev
		}
	}
}

func TestValidateName(t *testing.T) {
	for _, good := range []string{"web", "a", "Web-1.dev_x", "api2", strings.Repeat("x", MaxNameLength), "abc"} {
		assert.NoError(t, ValidateName(good), good)
	}
	for _, bad := range []string{"", "1web", "-web", "we b", "web/1", "wéb", strings.Repeat("x", MaxNameLength+1),
		"beef", "cafe1234", "proc_web", "proc_0123456789ab", "deadbeef0123"} {
		err := ValidateName(bad)
		assert.ErrorIs(t, err, ErrInvalidOptions, "%q", bad)
	}
}

func TestNamedStartReuseRefuseReplace(t *testing.T) {
	f := newDevFixture(t, nil, nil)
	web, fp := f.start(StartOptions{Name: "web", Command: "npm run dev", Env: []string{"PORT=3000"}})
	assert.Equal(t, "web", web.Name)
	assert.False(t, web.Reused)

	again, err := f.r.Start(t.Context(), StartOptions{Name: "web", Command: "npm run dev", Env: []string{"PORT=3000"}})
	require.NoError(t, err)
	assert.True(t, again.Reused, "the same command under the same name is reused")
	assert.Equal(t, web.ID, again.ID)
	assert.Len(t, f.pe.Procs(), 1, "nothing else was started")

	for _, other := range []StartOptions{
		{Name: "web", Command: "npm start", Env: []string{"PORT=3000"}},
		{Name: "web", Command: "npm run dev", Env: []string{"PORT=4000"}},
		{Name: "web", Command: "npm run dev", Env: []string{"PORT=3000"}, Dir: "/elsewhere"},
	} {
		_, err = f.r.Start(t.Context(), other)
		require.ErrorIs(t, err, ErrNameInUse, "%+v", other)
		assert.Contains(t, err.Error(), web.ID, "the error names the holder")
		assert.Contains(t, err.Error(), "npm run dev")
	}
	assert.Len(t, f.pe.Procs(), 1)

	repl, err := f.r.Start(t.Context(), StartOptions{Name: "web", Command: "npm start", Replace: true})
	require.NoError(t, err)
	assert.NotEqual(t, web.ID, repl.ID)
	assert.Equal(t, []env.Signal{env.SIGTERM}, fp.Signals(), "the holder's tree was killed first")
	old, err := f.r.Get(t.Context(), web.ID)
	require.NoError(t, err)
	assert.Equal(t, StateKilled, old.State)
	got, err := f.r.Get(t.Context(), "web")
	require.NoError(t, err)
	assert.Equal(t, repl.ID, got.ID, "the name now names the new process")

	// Once the holder's tree ended on its own, the name is free.
	f.pe.Last().Exit(env.Exited(0))
	_, err = f.r.WaitTree(t.Context(), repl.ID, 0)
	require.NoError(t, err)
	fresh, err := f.r.Start(t.Context(), StartOptions{Name: "web", Command: "npm start"})
	require.NoError(t, err)
	assert.False(t, fresh.Reused)
	assert.NotEqual(t, repl.ID, fresh.ID)

	_, err = f.r.Start(t.Context(), StartOptions{Command: "x", Replace: true})
	require.ErrorIs(t, err, ErrInvalidOptions, "replace without a name")
	_, err = f.r.Start(t.Context(), StartOptions{Command: "x", Name: "beef"})
	require.ErrorIs(t, err, ErrInvalidOptions, "a name that reads as an ID prefix")
}

func TestConcurrentNamedStartsStartOne(t *testing.T) {
	f := newDevFixture(t, nil, nil)
	const n = 20
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			in, err := f.r.Start(t.Context(), StartOptions{Name: "web", Command: "npm run dev"})
			assert.NoError(t, err)
			ids[i] = in.ID
		})
	}
	wg.Wait()
	assert.Len(t, f.pe.Procs(), 1, "exactly one process was started")
	for _, id := range ids {
		assert.Equal(t, ids[0], id)
	}
	assert.Len(t, listed(t, f.r, ListOptions{}), 1)
}

func TestNamesResolveLikeIDs(t *testing.T) {
	f := newDevFixture(t, nil, nil)
	in, fp := f.start(StartOptions{Name: "api", Command: "serve"})
	fp.WriteOutput("hello\n")
	got, err := f.r.Get(t.Context(), "api")
	require.NoError(t, err)
	assert.Equal(t, in.ID, got.ID)
	id, err := f.r.Resolve("api")
	require.NoError(t, err)
	assert.Equal(t, in.ID, id)
	res, err := f.r.Kill(t.Context(), "api", KillOptions{})
	require.NoError(t, err)
	assert.Equal(t, StateKilled, res.State)
	// Finished, the name still finds it (its logs stay readable).
	lr, err := f.r.Log(t.Context(), "api", LogOptions{})
	require.NoError(t, err)
	assert.Equal(t, in.ID, lr.ID)

	_, err = f.r.Get(t.Context(), "nobody")
	require.ErrorIs(t, err, ErrInvalidID, "a name nobody has")
}

func TestReadyByPolledPort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newDevFixture(t, nil, nil)
		sub := f.r.Subscribe()
		defer sub.Close()
		f.pe.listenForeign(3000) // another program holds the port: not ours
		in, fp := f.start(StartOptions{Name: "web", Ready: &ReadyOptions{Port: 3000}})
		require.Equal(t, &ReadyOptions{Port: 3000}, in.Ready)

		time.Sleep(10 * time.Second)
		synctest.Wait()
		assert.False(t, f.ready(in.ID), "a foreign listener on the port never counts")
		looks := f.pe.looks.Load()
		// One look per poll at age/50 clamped to [20ms, 1s]: 50 in the
		// first second, about 116 more to 10 s; no busy loop.
		assert.Greater(t, looks, int64(100))
		assert.Less(t, looks, int64(250))

		f.pe.listen(fp.PID(), 3000)
		ev := nextOf(t, sub, EventReady, in.ID)
		assert.Contains(t, ev.Summary, "(web) is ready: listening on 3000")
		got, err := f.r.Get(t.Context(), in.ID)
		require.NoError(t, err)
		assert.False(t, got.ReadyAt.IsZero())
		assert.False(t, got.ReadyAt.Before(got.StartedAt))

		looks = f.pe.looks.Load()
		time.Sleep(time.Minute)
		synctest.Wait()
		assert.Equal(t, looks, f.pe.looks.Load(), "no polling once ready")
	})
}

func TestReadyByPortWaiter(t *testing.T) {
	pe := newPortsEnv()
	pe.waiter = true
	f := newDevFixture(t, pe, nil)
	in, fp := f.start(StartOptions{Ready: &ReadyOptions{Port: 8080}})
	f.pe.listen(fp.PID(), 8080)
	got, err := f.r.WaitReady(t.Context(), in.ID, generous)
	require.NoError(t, err)
	assert.False(t, got.ReadyAt.IsZero())
	assert.Zero(t, pe.looks.Load(), "the PortWaiter waits; nothing polls")
}

func TestReadyByPatternAcrossSplitWrites(t *testing.T) {
	f := newDevFixture(t, nil, nil)
	in, fp := f.start(StartOptions{Ready: &ReadyOptions{Pattern: `^ *Local: +http://localhost:\d+/$`}})
	for _, chunk := range []string{"compiling…\n  Loc", "al: \x1b[3", "6mhttp://localhost:51", "73/\x1b[0m"} {
		fp.WriteOutput(chunk)
	}
	// The line is not complete yet.
	_, err := f.r.WaitReady(t.Context(), in.ID, 50*time.Millisecond)
	require.ErrorIs(t, err, ErrWaitTimeout)
	fp.WriteOutput("\n")
	got, err := f.r.WaitReady(t.Context(), in.ID, generous)
	require.NoError(t, err)
	assert.False(t, got.ReadyAt.IsZero())
	assert.Zero(t, f.pe.looks.Load(), "a pattern is not polled for")
	assert.Zero(t, f.pe.urlChecks.Load())
}

func TestReadyURLOnlyAfterPort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newDevFixture(t, nil, nil)
		f.pe.setURLStatus(200)
		in, fp := f.start(StartOptions{Ready: &ReadyOptions{Port: 3000, URL: "http://127.0.0.1:3000/health"}})
		time.Sleep(5 * time.Second)
		synctest.Wait()
		assert.Zero(t, f.pe.urlChecks.Load(), "the URL is not checked before the port holds")
		assert.False(t, f.ready(in.ID))

		f.pe.setURLStatus(503)
		f.pe.listen(fp.PID(), 3000)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		assert.NotZero(t, f.pe.urlChecks.Load())
		assert.False(t, f.ready(in.ID), "503 is not ready")

		f.pe.setURLStatus(302)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		assert.True(t, f.ready(in.ID), "a redirect answer is ready")
	})
}

func TestReadyNeedsEveryCondition(t *testing.T) {
	f := newDevFixture(t, nil, nil)
	in, fp := f.start(StartOptions{Ready: &ReadyOptions{Port: 3000, Pattern: "compiled"}})
	f.pe.listen(fp.PID(), 3000)
	require.Eventually(t, func() bool { return f.pe.looks.Load() > 0 }, generous, poll)
	_, err := f.r.WaitReady(t.Context(), in.ID, 100*time.Millisecond)
	require.ErrorIs(t, err, ErrWaitTimeout, "the port alone is not enough")
	assert.Contains(t, err.Error(), `listening on 3000, printed a line matching "compiled"`)
	fp.WriteOutput("webpack compiled\n")
	got, err := f.r.WaitReady(t.Context(), in.ID, generous)
	require.NoError(t, err)
	assert.False(t, got.ReadyAt.IsZero())
}

func TestReadyUnsupportedByBackend(t *testing.T) {
	pe := newPortsEnv()
	pe.noPorts, pe.noURL = true, true
	f := newDevFixture(t, pe, nil)
	for _, ro := range []ReadyOptions{{Port: 3000}, {URL: "http://127.0.0.1:3000/"}} {
		_, err := f.r.Start(t.Context(), StartOptions{Command: "serve", Ready: &ro})
		require.ErrorIs(t, err, env.ErrUnsupported, "%+v", ro)
		require.ErrorIs(t, err, ErrInvalidOptions, "the caller's to change")
		assert.Contains(t, err.Error(), `backend "fake" cannot`)
	}
	assert.Empty(t, pe.Procs(), "nothing was started")
	assert.Empty(t, listed(t, f.r, ListOptions{All: true}), "nothing was registered")
	// A pattern needs nothing of the backend.
	f.start(StartOptions{Ready: &ReadyOptions{Pattern: "up"}})

	for _, ro := range []ReadyOptions{{}, {Port: 70000}, {Pattern: "("}, {URL: "ftp://x/"}} {
		_, err := f.r.Start(t.Context(), StartOptions{Command: "serve", Ready: &ro})
		require.ErrorIs(t, err, ErrInvalidOptions, "%+v", ro)
	}
}

func TestWaitReady(t *testing.T) {
	f := newDevFixture(t, nil, nil)
	plain, _ := f.start(StartOptions{Command: "sleep"})
	_, err := f.r.WaitReady(t.Context(), plain.ID, time.Second)
	require.ErrorIs(t, err, ErrInvalidOptions, "no readiness conditions")

	ended, fp := f.start(StartOptions{Ready: &ReadyOptions{Pattern: "up"}})
	fp.WriteOutput("Error: EADDRINUSE\n")
	fp.Exit(env.Exited(1))
	got, err := f.r.WaitReady(t.Context(), ended.ID, generous)
	require.NoError(t, err, "ending first is an answer, not an error")
	assert.True(t, got.ReadyAt.IsZero())
	assert.Equal(t, StateExited, got.State)
	assert.True(t, got.ResultReported, "the caller received the end")

	slow, fp := f.start(StartOptions{Ready: &ReadyOptions{Pattern: "up"}})
	got, err = f.r.WaitReady(t.Context(), slow.ID, 20*time.Millisecond)
	require.ErrorIs(t, err, ErrWaitTimeout)
	assert.Equal(t, StateRunning, got.State)
	fp.WriteOutput("up\n")
	got, err = f.r.WaitReady(t.Context(), "proc_"+strings.TrimPrefix(slow.ID, "proc_")[:6], generous)
	require.NoError(t, err)
	assert.False(t, got.ReadyAt.IsZero())
}

func TestCrashedOnlyWhenItEndsOnItsOwn(t *testing.T) {
	f := newDevFixture(t, nil, nil)
	sub := f.r.Subscribe()
	defer sub.Close()

	killed, kp := f.start(StartOptions{Name: "killed", Ready: &ReadyOptions{Pattern: "up"}})
	kp.WriteOutput("up\n")
	nextOf(t, sub, EventReady, killed.ID)
	_, err := f.r.Kill(t.Context(), killed.ID, KillOptions{})
	require.NoError(t, err)
	_, err = f.r.WaitTree(t.Context(), killed.ID, 0)
	require.NoError(t, err)

	notReady, np := f.start(StartOptions{Ready: &ReadyOptions{Pattern: "up"}})
	np.Exit(env.Exited(1))
	_, err = f.r.WaitTree(t.Context(), notReady.ID, 0)
	require.NoError(t, err)

	crashed, cp := f.start(StartOptions{Name: "web", Ready: &ReadyOptions{Pattern: "up"}})
	cp.WriteOutput("up\n")
	nextOf(t, sub, EventReady, crashed.ID)
	cp.WriteOutput("panic: boom\n")
	cp.Exit(env.Exited(2))

	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	for {
		ev, err := sub.Next(ctx)
		require.NoError(t, err)
		if ev.Type != EventCrashed {
			continue
		}
		require.Equal(t, crashed.ID, ev.ID, "only the process that ended on its own after it was ready crashed")
		require.NotNil(t, ev.Status)
		assert.Equal(t, 2, ev.Status.Code)
		assert.Equal(t, StateExited, ev.State)
		assert.Equal(t, "up\npanic: boom", ev.Tail)
		assert.Contains(t, ev.Summary, "(web) crashed")
		break
	}
}

func TestTTLExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newDevFixture(t, nil, nil)
		sub := f.r.Subscribe()
		defer sub.Close()
		in, fp := f.start(StartOptions{Name: "web", TTL: 2 * time.Hour, Ready: &ReadyOptions{Pattern: "up"}})
		fp.WriteOutput("up\n")
		assert.Equal(t, 2*time.Hour, in.TTL.D())
		assert.Equal(t, in.StartedAt.Add(2*time.Hour), in.ExpiresAt)

		time.Sleep(time.Hour)
		synctest.Wait()
		got, err := f.r.Get(t.Context(), in.ID)
		require.NoError(t, err)
		require.Equal(t, StateRunning, got.State)

		time.Sleep(time.Hour)
		ev := nextOf(t, sub, EventTTLExpired, in.ID)
		assert.Contains(t, ev.Summary, "TTL of 2h0m0s ran out")
		got, err = f.r.WaitTree(t.Context(), in.ID, 0)
		require.NoError(t, err)
		assert.Equal(t, StateTimedOut, got.State)
		assert.Equal(t, TimedOutTTL, got.TimedOut)
		assert.Equal(t, []env.Signal{env.SIGTERM}, fp.Signals())
		synctest.Wait()
		for {
			ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
			ev, err := sub.Next(ctx)
			cancel()
			if err != nil {
				break
			}
			assert.NotEqual(t, EventCrashed, ev.Type, "a TTL kill is no crash")
		}
	})
}

func TestBackgroundIdleTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newDevFixture(t, nil, nil)
		in, fp := f.start(StartOptions{IdleTimeout: 10 * time.Minute})
		assert.Equal(t, 10*time.Minute, in.IdleTimeout.D())
		assert.Equal(t, time.Now().Add(10*time.Minute), in.IdleExpiresAt, "counted from the start")
		time.Sleep(5 * time.Minute)
		fp.WriteOutput("still here\n")
		synctest.Wait()
		wrote := time.Now()
		time.Sleep(9 * time.Minute)
		synctest.Wait()
		got, err := f.r.Get(t.Context(), in.ID)
		require.NoError(t, err)
		require.Equal(t, StateRunning, got.State, "output reset the idle clock")
		assert.Equal(t, wrote.Add(10*time.Minute), got.IdleExpiresAt, "moved by the write")

		got, err = f.r.Wait(t.Context(), in.ID, 0)
		require.NoError(t, err)
		assert.Equal(t, StateTimedOut, got.State)
		assert.Equal(t, TimedOutIdle, got.TimedOut)
		assert.False(t, got.EndedAt.Before(got.StartedAt.Add(15*time.Minute)))
		assert.Zero(t, got.IdleExpiresAt, "nothing left to time out")
	})
}

func TestPortsAndOwners(t *testing.T) {
	f := newDevFixture(t, nil, nil)
	f.pe.listenForeign(8080)
	web, wp := f.start(StartOptions{Name: "web", Command: "vite"})
	api, ap := f.start(StartOptions{Command: "api"})
	f.pe.listen(wp.PID(), 5173)
	f.pe.listen(ap.PID(), 3000)
	f.pe.listen(ap.PID(), 3001)

	ports, err := f.r.Ports(t.Context(), "")
	require.NoError(t, err)
	var got []string
	for _, p := range ports {
		got = append(got, fmt.Sprintf("%d %s %s %d %s", p.Port, p.Backend, p.ID, p.PID, p.Name))
	}
	assert.Equal(t, []string{
		fmt.Sprintf("3000 local %s %d ", api.ID, ap.PID()),
		fmt.Sprintf("3001 local %s %d ", api.ID, ap.PID()),
		fmt.Sprintf("5173 local %s %d web", web.ID, wp.PID()),
		"8080 local  99 ",
	}, got)

	list := listed(t, f.r, ListOptions{Ports: true})
	require.Len(t, list, 2)
	assert.Equal(t, []int{5173}, list[0].Ports)
	assert.Equal(t, []int{3000, 3001}, list[1].Ports)
	assert.Nil(t, listed(t, f.r, ListOptions{})[0].Ports, "only asked for")

	pe := newPortsEnv()
	pe.noPorts = true
	_, err = newDevFixture(t, pe, nil).r.Ports(t.Context(), "")
	require.ErrorIs(t, err, env.ErrUnsupported)
}

func TestDevServerSurvivesRestart(t *testing.T) {
	stateFile := filepath.Join(t.TempDir(), "state.json")
	pe := newPortsEnv()
	withState := func(c *Config) { c.StateFile = stateFile }
	r1 := newDevFixture(t, pe, withState).r
	_, err := r1.Recover(t.Context())
	require.NoError(t, err)
	web, err := r1.Start(t.Context(), StartOptions{Name: "web", Command: "vite", Env: []string{"A=1"}, TTL: time.Hour,
		IdleTimeout: time.Hour, Ready: &ReadyOptions{Port: 5173}})
	require.NoError(t, err)
	pe.listen(pe.Last().PID(), 5173)
	web, err = r1.WaitReady(t.Context(), web.ID, generous)
	require.NoError(t, err)
	api, err := r1.Start(t.Context(), StartOptions{Name: "api", Command: "api", Ready: &ReadyOptions{Pattern: "listening"}})
	require.NoError(t, err)
	ap := pe.Last()
	require.NoError(t, r1.Close())

	r2 := newDevFixture(t, pe, withState).r
	_, err = r2.Recover(t.Context())
	require.NoError(t, err)
	got, err := r2.Get(t.Context(), "web")
	require.NoError(t, err)
	assert.Equal(t, web.ID, got.ID)
	assert.Equal(t, StateRunning, got.State)
	assert.True(t, got.ReadyAt.Equal(web.ReadyAt), "ready stays ready: %v, was %v", got.ReadyAt, web.ReadyAt)
	assert.Equal(t, time.Hour, got.TTL.D())
	assert.True(t, got.ExpiresAt.Equal(web.ExpiresAt))
	assert.Equal(t, time.Hour, got.IdleTimeout.D())
	assert.Equal(t, &ReadyOptions{Port: 5173}, got.Ready)

	again, err := r2.Start(t.Context(), StartOptions{Name: "web", Command: "vite", Env: []string{"A=1"}})
	require.NoError(t, err)
	assert.True(t, again.Reused, "the environment's digest survived the restart")
	_, err = r2.Start(t.Context(), StartOptions{Name: "web", Command: "vite", Env: []string{"A=2"}})
	require.ErrorIs(t, err, ErrNameInUse)

	// The watch of a process not ready yet was re-armed.
	ap.WriteOutput("listening on 3000\n")
	got, err = r2.WaitReady(t.Context(), api.ID, generous)
	require.NoError(t, err)
	assert.False(t, got.ReadyAt.IsZero())
	assert.Equal(t, "api", got.Name)
}
