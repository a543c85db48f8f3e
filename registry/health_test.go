package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
)

// The registry's policy toward a sick backend, on a scripted one: its
// health check says what the test says, and while it is frozen every call
// into it (a signal, a look at the tree, a port look-up) blocks until it
// thaws or the call's deadline passes, as calls into a paused container
// do. The tests run in a synctest bubble, so the bounds they check are
// the registry's own deadlines in fake time, not the machine's speed.

// sickEnv is an envtest.Fake with a health check, a one-call port look-up
// and a switch that freezes it.
type sickEnv struct {
	*envtest.Fake

	mu     sync.Mutex
	health env.Health
	frozen chan struct{} // non-nil while frozen; closed by thaw
	// held: non-nil while health checks wait (holdHealth); a check
	// answers once it is closed.
	held      chan struct{}
	treeCalls int
	ports     map[int][]env.Listener // by PID
}

func newSickEnv() *sickEnv {
	return &sickEnv{Fake: newFakeEnv(), health: env.Health{Condition: env.ConditionOK}, ports: map[int][]env.Listener{}}
}

var (
	_ env.HealthChecker  = (*sickEnv)(nil)
	_ env.TreePortLister = (*sickEnv)(nil)
)

func (s *sickEnv) Capabilities() env.Capabilities {
	c := s.Fake.Capabilities()
	c.Ports = true
	return c
}

func (s *sickEnv) Start(ctx context.Context, spec env.Spec) (env.Process, error) {
	p, err := s.Fake.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &gatedProc{Process: p, gate: s.block}, nil
}

func (s *sickEnv) Attach(ctx context.Context, ref env.Ref) (env.Process, error) {
	p, err := s.Fake.Attach(ctx, ref)
	if err != nil {
		return nil, err
	}
	return &gatedProc{Process: p, gate: s.block}, nil
}

// Close leaves the Fake open, as the daemon leaves a sandbox for the next
// registry: a test's registries share it.
func (s *sickEnv) Close() error { return nil }

// freeze makes calls block and the health check answer h.
func (s *sickEnv) freeze(h env.Health) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.health = h
	if s.frozen == nil {
		s.frozen = make(chan struct{})
	}
}

// freezeQuietly makes calls block while the health check still says ok:
// a backend whose sickness only the calls show.
func (s *sickEnv) freezeQuietly() { s.freeze(env.Health{Condition: env.ConditionOK}) }

func (s *sickEnv) thaw() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.health = env.Health{Condition: env.ConditionOK}
	if s.frozen != nil {
		close(s.frozen)
		s.frozen = nil
	}
}

// block waits while the backend is frozen.
func (s *sickEnv) block(ctx context.Context) error {
	s.mu.Lock()
	ch := s.frozen
	s.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sick: no answer: %w", ctx.Err())
	}
}

func (s *sickEnv) Health(ctx context.Context) env.Health {
	s.mu.Lock()
	held := s.held
	s.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-ctx.Done():
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.health
}

// holdHealth makes health checks wait until the returned release is
// called, so that a test sees what an observation marked before a check
// kicked by it answers.
func (s *sickEnv) holdHealth() (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.held = ch
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.held = nil
		s.mu.Unlock()
		close(ch)
	}
}

func (s *sickEnv) TreeListeners(ctx context.Context, procs []env.Process) ([][]env.Listener, error) {
	if err := s.block(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.treeCalls++
	out := make([][]env.Listener, len(procs))
	for i, p := range procs {
		out[i] = s.ports[p.PID()]
	}
	return out, nil
}

func (s *sickEnv) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.treeCalls
}

func (s *sickEnv) listen(pid, port int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ports[pid] = append(s.ports[pid], env.Listener{Port: port, Addr: "127.0.0.1", PID: pid})
}

// gatedProc is a process whose signals and looks at the tree first pass
// its gate: a sickEnv's blocks while the backend is frozen, a
// crowdedEnv's takes as long as the crowd makes a call take.
type gatedProc struct {
	env.Process
	gate func(context.Context) error
}

func (p *gatedProc) Signal(ctx context.Context, sig env.Signal) error {
	if err := p.gate(ctx); err != nil {
		return err
	}
	return p.Process.Signal(ctx, sig)
}

func (p *gatedProc) Survivors(ctx context.Context) ([]int, error) {
	if err := p.gate(ctx); err != nil {
		return nil, err
	}
	return p.Process.Survivors(ctx)
}

// sickFixture is a registry with two backends: "sick" (a sickEnv) and
// "local" (a plain Fake).
type sickFixture struct {
	r     *Registry
	sick  *sickEnv
	local *envtest.Fake
}

func newSickFixture(t *testing.T, sick *sickEnv, stateFile string) *sickFixture {
	t.Helper()
	f := &sickFixture{sick: sick, local: newFakeEnv()}
	r, err := New(Config{
		Open: func(ctx context.Context, target string) (env.Environment, error) {
			switch target {
			case "sick":
				return f.sick, nil
			case "local":
				return f.local, nil
			}
			return nil, fmt.Errorf("unknown target %q", target)
		},
		DefaultGrace: time.Second,
		Logger:       slog.New(slog.DiscardHandler),
		StateFile:    stateFile,
	})
	require.NoError(t, err)
	f.r = r
	t.Cleanup(func() { r.Close() })
	return f
}

func (f *sickFixture) start(t *testing.T, backend string) Info {
	t.Helper()
	in, err := f.r.Start(ctxT(t), StartOptions{Backend: backend, Command: "serve " + backend})
	require.NoError(t, err)
	return in
}

// settle lets the prober run its checks: the first right away, the next
// ones after their pace.
func settle(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// TestListShowsASickBackendWithoutWaiting: a listing with ports returns
// within listPortsWait whatever the backend does, shows what is known
// (ports "?"), and once a health check has run, the backend's condition;
// the healthy backend's processes are listed in full all along.
func TestListShowsASickBackendWithoutWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newSickFixture(t, newSickEnv(), "")
		sick := f.start(t, "sick")
		local := f.start(t, "local")
		f.sick.listen(sick.PID, 3000)
		settle(time.Millisecond)

		list := func() map[string]Info {
			began := time.Now()
			infos := listed(t, f.r, ListOptions{Ports: true})
			assert.LessOrEqual(t, time.Since(began), listPortsWait, "a listing waits at most listPortsWait")
			m := map[string]Info{}
			for _, in := range infos {
				m[in.ID] = in
			}
			return m
		}
		got := list()
		assert.Equal(t, []int{3000}, got[sick.ID].Ports)
		assert.False(t, got[sick.ID].PortsUnknown)

		// Paused, before any health check has seen it: the look-up
		// overruns, the listing does not.
		f.sick.freeze(env.Health{Condition: env.ConditionPaused, Detail: "container c is paused: docker unpause c"})
		settle(portsCacheTTL)
		got = list()
		assert.True(t, got[sick.ID].PortsUnknown, "ports of a backend that does not answer are unknown")
		assert.Empty(t, got[sick.ID].Ports)
		assert.Equal(t, StateRunning, got[local.ID].State)
		assert.False(t, got[local.ID].PortsUnknown)

		// The health check tells what it is; no look-up is tried any more.
		settle(healthEvery)
		calls := f.sick.calls()
		got = list()
		assert.Equal(t, env.ConditionPaused, got[sick.ID].BackendCondition)
		assert.Equal(t, "running (sick paused)", got[sick.ID].StateText())
		assert.True(t, got[sick.ID].PortsUnknown)
		assert.Empty(t, got[local.ID].BackendCondition)
		assert.Equal(t, calls, f.sick.calls(), "a backend known not to answer is not asked for ports")
		b := backendsByTarget(f.r)
		assert.Equal(t, env.ConditionPaused, b["sick"].Health.Condition)
		assert.Contains(t, b["sick"].Health.Detail, "docker unpause c")
		assert.Equal(t, env.ConditionOK, b["local"].Health.Condition)

		f.sick.thaw()
		settle(healthEveryBad)
		settle(portsCacheTTL)
		got = list()
		assert.Empty(t, got[sick.ID].BackendCondition)
		assert.Equal(t, []int{3000}, got[sick.ID].Ports)
		assert.False(t, got[sick.ID].PortsUnknown)
	})
}

func backendsByTarget(r *Registry) map[string]BackendInfo {
	m := map[string]BackendInfo{}
	for _, b := range r.Backends() {
		m[b.Target] = b
	}
	return m
}

// TestListPortsOneLookPerBackend: twenty processes on one backend cost one
// look-up per listing, and listings within portsCacheTTL none.
func TestListPortsOneLookPerBackend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newSickFixture(t, newSickEnv(), "")
		for i := range 20 {
			in := f.start(t, "sick")
			f.sick.listen(in.PID, 3000+i)
		}
		infos := listed(t, f.r, ListOptions{Ports: true})
		require.Len(t, infos, 20)
		for i, in := range infos {
			assert.Equal(t, []int{3000 + i}, in.Ports, in.ID)
		}
		assert.Equal(t, 1, f.sick.calls(), "one look for the whole backend")
		listed(t, f.r, ListOptions{Ports: true})
		assert.Equal(t, 1, f.sick.calls(), "a listing within portsCacheTTL reads the last look")
		settle(portsCacheTTL)
		listed(t, f.r, ListOptions{Ports: true})
		assert.Equal(t, 2, f.sick.calls())
	})
}

// TestKillOnAPausedBackendIsPending: a kill on a backend a health check
// found paused returns at once, unreachable and not killed; the kill stays
// pending, runs when the backend answers again, and a kill_finished event
// says how it ended.
func TestKillOnAPausedBackendIsPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newSickFixture(t, newSickEnv(), "")
		in := f.start(t, "sick")
		fp := f.sick.Last()
		sub := f.r.Subscribe()
		defer sub.Close()
		f.sick.freeze(env.Health{Condition: env.ConditionPaused, Detail: "container c is paused: docker unpause c"})
		settle(healthEvery)

		began := time.Now()
		res, err := f.r.Kill(ctxT(t), in.ID, KillOptions{Grace: time.Second})
		assert.Zero(t, time.Since(began), "nothing is waited for on a backend known to be paused")
		require.ErrorIs(t, err, ErrUnreachable)
		assert.True(t, res.Unreachable)
		assert.Contains(t, res.Detail, "sick is paused")
		assert.Equal(t, StateRunning, res.State, "an unreachable process is never reported killed")
		assert.Empty(t, fp.Signals(), "nothing was sent")
		got, err := f.r.Get(ctxT(t), in.ID)
		require.NoError(t, err)
		assert.True(t, got.KillPending)
		assert.Equal(t, "running (sick paused), kill pending", got.StateText())

		f.sick.thaw()
		ev := nextOfType(t, sub, EventKillFinished)
		assert.Equal(t, in.ID, ev.ID)
		require.NotNil(t, ev.Kill)
		assert.Equal(t, StateKilled, ev.Kill.State)
		assert.False(t, ev.Kill.Unreachable)
		assert.Equal(t, StateKilled, ev.State)
		assert.Equal(t, []env.Signal{env.SIGTERM}, fp.Signals())
		got, err = f.r.Get(ctxT(t), in.ID)
		require.NoError(t, err)
		assert.False(t, got.KillPending)
		assert.Equal(t, StateKilled, got.State)
	})
}

// TestKillJustAfterResumeRuns: a backend that answers again (a container
// unpaused) a moment after a health check found it paused is not refused
// on that finding: a kill asks for a new check first, and kills.
func TestKillJustAfterResumeRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newSickFixture(t, newSickEnv(), "")
		in := f.start(t, "sick")
		fp := f.sick.Last()
		f.sick.freeze(env.Health{Condition: env.ConditionPaused, Detail: "container c is paused: docker unpause c"})
		settle(healthEvery)
		h, probed := f.r.condition("sick")
		require.Equal(t, env.ConditionPaused, h.Condition)
		require.True(t, probed)
		settle(healthFresh + time.Millisecond)
		f.sick.thaw()
		// The prober's next round is up to healthEveryBad away.
		res, err := f.r.Kill(ctxT(t), in.ID, KillOptions{Grace: time.Second})
		require.NoError(t, err)
		assert.False(t, res.Unreachable)
		assert.Equal(t, StateKilled, res.State)
		assert.Equal(t, []env.Signal{env.SIGTERM}, fp.Signals())
	})
}

// nextOfType returns the next event of type typ, skipping others.
func nextOfType(t *testing.T, sub *Subscription, typ EventType) Event {
	t.Helper()
	for {
		ev, err := sub.Next(ctxT(t))
		require.NoError(t, err, "waiting for a %s event", typ)
		if ev.Type == typ {
			return ev
		}
	}
}

// TestKillOverrunIsPending: a backend whose health check still says ok but
// whose calls hang (what a container paused a moment ago looks like) costs
// a kill killCallTimeout, not its whole sickness; the kill is pending, and
// finished once the calls are answered.
func TestKillOverrunIsPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newSickFixture(t, newSickEnv(), "")
		in := f.start(t, "sick")
		fp := f.sick.Last()
		sub := f.r.Subscribe()
		defer sub.Close()
		f.sick.freezeQuietly()

		began := time.Now()
		res, err := f.r.Kill(ctxT(t), in.ID, KillOptions{Grace: time.Second})
		took := time.Since(began)
		assert.LessOrEqual(t, took, killCallTimeout, "one call's deadline, not the backend's sickness")
		require.ErrorIs(t, err, ErrUnreachable)
		assert.True(t, res.Unreachable)
		assert.Contains(t, res.Detail, "did not answer")
		assert.Equal(t, StateRunning, res.State)
		got, _ := f.r.Get(ctxT(t), in.ID)
		assert.True(t, got.KillPending)

		// Retried at each health check while the calls hang; done once
		// they are answered.
		settle(3 * healthEvery)
		got, _ = f.r.Get(ctxT(t), in.ID)
		assert.True(t, got.KillPending)
		assert.Equal(t, StateRunning, got.State)
		f.sick.thaw()
		ev := nextOfType(t, sub, EventKillFinished)
		require.NotNil(t, ev.Kill)
		assert.Equal(t, StateKilled, ev.Kill.State)
		assert.Contains(t, fp.Signals(), env.SIGTERM)
	})
}

// TestKillAllWithASickBackend: kill --all kills what it can reach, reports
// the rest unreachable, and returns within the grace plus killBound.
func TestKillAllWithASickBackend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newSickFixture(t, newSickEnv(), "")
		sick := f.start(t, "sick")
		local := f.start(t, "local")
		f.sick.freezeQuietly()
		began := time.Now()
		res, err := f.r.KillAll(ctxT(t), KillAllOptions{Grace: time.Second})
		assert.LessOrEqual(t, time.Since(began), time.Second+killBound)
		require.ErrorIs(t, err, ErrUnreachable)
		require.Len(t, res, 2)
		by := map[string]KillResult{}
		for _, r := range res {
			by[r.ID] = r
		}
		assert.Equal(t, StateKilled, by[local.ID].State)
		assert.False(t, by[local.ID].Unreachable)
		assert.True(t, by[sick.ID].Unreachable)
		assert.Equal(t, StateRunning, by[sick.ID].State)
		f.sick.thaw()
	})
}

// TestKillUnansweredMidWay: a backend that stops answering after the first
// signal got through leaves a pending SIGKILL (the grace has begun), and
// the process is the kill's however it ends.
func TestKillUnansweredMidWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sick := newSickEnv()
		f := newSickFixture(t, sick, "")
		sick.OnStart = func(p *envtest.FakeProcess) error { p.Ignore(env.SIGTERM); return nil }
		in := f.start(t, "sick")
		fp := sick.Last()
		sub := f.r.Subscribe()
		defer sub.Close()
		go func() {
			// Freeze once TERM was delivered, within the grace.
			for len(fp.Signals()) == 0 {
				time.Sleep(time.Millisecond)
			}
			sick.freezeQuietly()
		}()
		res, err := f.r.Kill(ctxT(t), in.ID, KillOptions{Grace: time.Second})
		require.ErrorIs(t, err, ErrUnreachable)
		assert.True(t, res.Unreachable)
		f.r.mu.Lock()
		p := f.r.procs[in.ID]
		f.r.mu.Unlock()
		p.mu.Lock()
		require.NotNil(t, p.pending)
		assert.Equal(t, env.SIGKILL, p.pending.plan.sig, "the grace was given: what is left is SIGKILL")
		p.mu.Unlock()
		sick.thaw()
		ev := nextOfType(t, sub, EventKillFinished)
		assert.Equal(t, StateKilled, ev.Kill.State)
		assert.Equal(t, []env.Signal{env.SIGTERM, env.SIGKILL}, fp.Signals())
	})
}

// TestPendingKillDroppedWhenTheTreeEnds: a process whose tree ends while
// its kill is pending (its sandbox vanished) settles the kill with a
// kill_finished event; nothing is left pending.
func TestPendingKillDroppedWhenTheTreeEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newSickFixture(t, newSickEnv(), "")
		in := f.start(t, "sick")
		fp := f.sick.Last()
		sub := f.r.Subscribe()
		defer sub.Close()
		f.sick.freeze(env.Health{Condition: env.ConditionUnreachable, Detail: "host down"})
		settle(healthEvery)
		_, err := f.r.Kill(ctxT(t), in.ID, KillOptions{})
		require.ErrorIs(t, err, ErrUnreachable)
		fp.Lose(fmt.Errorf("container gone: %w", env.ErrSandboxGone))
		ev := nextOfType(t, sub, EventKillFinished)
		assert.True(t, ev.Kill.AlreadyExited)
		assert.Equal(t, StateLost, ev.State)
		got, _ := f.r.Get(ctxT(t), in.ID)
		assert.False(t, got.KillPending)
		f.sick.thaw()
	})
}

// TestPendingKillSurvivesRestart: a pending kill is in the state file; the
// next registry runs it once the backend answers.
func TestPendingKillSurvivesRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		state := filepath.Join(t.TempDir(), "state.json")
		sick := newSickEnv()
		f := newSickFixture(t, sick, state)
		_, err := f.r.Recover(ctxT(t))
		require.NoError(t, err)
		in := f.start(t, "sick")
		sick.freeze(env.Health{Condition: env.ConditionPaused, Detail: "paused"})
		settle(healthEvery)
		_, err = f.r.Kill(ctxT(t), in.ID, KillOptions{Signal: env.SIGINT, Grace: 2 * time.Second})
		require.ErrorIs(t, err, ErrUnreachable)
		require.NoError(t, f.r.Close())

		sick.thaw()
		g := newSickFixture(t, sick, state)
		sub := g.r.Subscribe()
		defer sub.Close()
		_, err = g.r.Recover(ctxT(t))
		require.NoError(t, err)
		ev := nextOfType(t, sub, EventKillFinished)
		assert.Equal(t, in.ID, ev.ID)
		assert.Equal(t, StateKilled, ev.Kill.State)
		assert.Equal(t, env.SIGINT, ev.Kill.Signal, "the pending kill's own signal")
		got, err := g.r.Get(ctxT(t), in.ID)
		require.NoError(t, err)
		assert.False(t, got.KillPending)
	})
}

// TestObservedOverrunShownNotDecisive: a look-up that overran marks the
// backend unreachable in listings until a health check clears it, but a
// kill still tries it.
func TestObservedOverrunShownNotDecisive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newSickFixture(t, newSickEnv(), "")
		in := f.start(t, "sick")
		// The start's own health check runs on its own goroutine; let it
		// finish first, and hold the check the observation kicks, or its
		// OK could land before the mark is looked at.
		settle(time.Millisecond)
		release := f.sick.holdHealth()
		f.r.observe("sick", fmt.Errorf("a look: %w", context.DeadlineExceeded), "a port look-up")
		h, probed := f.r.condition("sick")
		assert.Equal(t, env.ConditionUnreachable, h.Condition)
		assert.False(t, probed)
		assert.True(t, strings.HasPrefix(h.Detail, "a port look-up did not answer"), h.Detail)
		release()
		res, err := f.r.Kill(ctxT(t), in.ID, KillOptions{Grace: time.Second})
		require.NoError(t, err)
		assert.Equal(t, StateKilled, res.State)
		settle(time.Millisecond)
		h, _ = f.r.condition("sick")
		assert.Equal(t, env.ConditionOK, h.Condition, "the kicked health check cleared it")
		assert.False(t, errors.Is(err, ErrUnreachable))
	})
}

// TestConditionChangeWakesChanged: a front end that shows the list live
// (the dashboard waits on Changed) learns of a backend that stops
// answering, and of one that answers again.
func TestConditionChangeWakesChanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newSickFixture(t, newSickEnv(), "")
		f.start(t, "sick")
		settle(time.Millisecond)
		changed := f.r.Changed()
		f.sick.freeze(env.Health{Condition: env.ConditionUnreachable, Detail: "host down"})
		settle(healthEvery)
		assert.True(t, isClosed(changed), "a backend that stopped answering is a change")
		changed = f.r.Changed()
		settle(healthEvery)
		assert.False(t, isClosed(changed), "no change while it stays down")
		f.sick.thaw()
		settle(healthEveryBad)
		assert.True(t, isClosed(changed), "a backend that answers again is a change")
	})
}

// slowHealth is a checker that answers after a delay, or at ctx's end.
type slowHealth struct {
	*sickEnv
	mu    sync.Mutex
	slow  int // the next checks that overrun
	calls int
}

func (s *slowHealth) Health(ctx context.Context) env.Health {
	s.mu.Lock()
	s.calls++
	slow := s.slow > 0
	if slow {
		s.slow--
	}
	s.mu.Unlock()
	if slow {
		<-ctx.Done()
		return env.Health{Condition: env.ConditionUnreachable, Detail: "late"}
	}
	return s.sickEnv.Health(ctx)
}

// TestOneLateHealthCheckIsNotSick: a health check that runs out of time
// once is asked again at once; only two in a row call the backend
// unreachable.
func TestOneLateHealthCheckIsNotSick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sick := newSickEnv()
		slow := &slowHealth{sickEnv: sick}
		r, err := New(Config{
			Open:   func(ctx context.Context, target string) (env.Environment, error) { return slow, nil },
			Logger: slog.New(slog.DiscardHandler),
		})
		require.NoError(t, err)
		defer r.Close()
		_, err = r.Start(ctxT(t), StartOptions{Backend: "sick", Command: "x"})
		require.NoError(t, err)
		settle(time.Millisecond)
		changed := r.Changed()
		slow.mu.Lock()
		slow.slow = 1
		slow.mu.Unlock()
		settle(healthEvery + env.HealthTimeout)
		h, _ := r.condition("sick")
		assert.Equal(t, env.ConditionOK, h.Condition, "one late check")
		assert.False(t, isClosed(changed))
		slow.mu.Lock()
		slow.slow = 2
		slow.mu.Unlock()
		settle(healthEvery + 2*env.HealthTimeout)
		h, _ = r.condition("sick")
		assert.Equal(t, env.ConditionUnreachable, h.Condition, "two late checks in a row")
	})
}

// TestKillAsksForAHealthCheck: a kill on a backend that stopped answering
// since its last health check asks for one, and gives up its call as soon
// as the check finds the backend paused, rather than at the call's
// deadline.
func TestKillAsksForAHealthCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newSickFixture(t, newSickEnv(), "")
		in := f.start(t, "sick")
		settle(2 * healthEveryBad)
		f.sick.freeze(env.Health{Condition: env.ConditionPaused, Detail: "container c is paused: docker unpause c"})
		began := time.Now()
		res, err := f.r.Kill(ctxT(t), in.ID, KillOptions{Grace: time.Second})
		assert.Less(t, time.Since(began), killCallTimeout, "the check, not the call's deadline, ended it")
		require.ErrorIs(t, err, ErrUnreachable)
		assert.True(t, res.Unreachable)
		assert.Contains(t, res.Detail, "paused")
		f.sick.thaw()
	})
}
