package registry

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
)

// The kill protocol: signal, grace, escalation, survivors, and kills that
// race an exit or each other.

func TestKillTermThenExit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		in, fp := f.start(StartOptions{})
		res, err := f.r.Kill(ctxT(t), in.ID, KillOptions{})
		require.NoError(t, err)
		if res.Signal != env.SIGTERM || res.Escalated || res.AlreadyExited || res.State != StateKilled ||
			res.Status == nil || res.Status.Signal != env.SIGTERM || len(res.Survivors) != 0 {
			t.Fatalf("Kill = %+v", res)
		}
		if s := fp.Signals(); len(s) != 1 || s[0] != env.SIGTERM {
			t.Fatalf("signals sent: %v", s)
		}
	})
}

// A process that traps TERM and exits 0 is still reported killed, not
// exited, with its real status.
func TestKilledIsNeverAPlainExit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, func(c *Config) {})
		f.onStart(func(p *envtest.FakeProcess) { p.Trap(env.SIGTERM, env.Exited(0)) })
		in, _ := f.start(StartOptions{})
		res, err := f.r.Kill(ctxT(t), in.ID, KillOptions{})
		require.NoError(t, err)
		if res.State != StateKilled || res.Status == nil || res.Status.Code != 0 || res.Status.Signal != "" {
			t.Fatalf("Kill = %+v", res)
		}
		got, _ := f.r.Get(t.Context(), in.ID)
		if got.State != StateKilled {
			t.Fatalf("state %s", got.State)
		}
	})
}

func TestKillEscalates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		f.onStart(func(p *envtest.FakeProcess) { p.Ignore(env.SIGTERM, env.SIGINT, env.SIGHUP) })
		in, fp := f.start(StartOptions{})
		begin := time.Now()
		res, err := f.r.Kill(ctxT(t), in.ID, KillOptions{Grace: 20 * time.Millisecond})
		require.NoError(t, err)
		assert.Equal(t, 20*time.Millisecond, time.Since(begin), "SIGKILL follows TERM after exactly the grace (bubble time)")
		if !res.Escalated || res.Signal != env.SIGTERM || res.State != StateKilled || res.Status.Signal != env.SIGKILL {
			t.Fatalf("Kill = %+v", res)
		}
		if s := fp.Signals(); len(s) != 2 || s[1] != env.SIGKILL {
			t.Fatalf("signals: %v", s)
		}
	})
}

func TestKillForce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		in, fp := f.start(StartOptions{})
		res, err := f.r.Kill(ctxT(t), in.ID, KillOptions{Force: true, Signal: env.SIGINT})
		if err != nil || res.Signal != env.SIGKILL || res.Escalated {
			t.Fatalf("Kill = %+v %v", res, err)
		}
		if s := fp.Signals(); len(s) != 1 || s[0] != env.SIGKILL {
			t.Fatalf("signals: %v", s)
		}
	})
}

func TestKillReportsSurvivors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		f.onStart(func(p *envtest.FakeProcess) { p.SetSurvivors(4242) })
		in, _ := f.start(StartOptions{})
		start := time.Now()
		res, err := f.r.Kill(ctxT(t), in.ID, KillOptions{})
		if err == nil || len(res.Survivors) != 1 || res.Survivors[0] != 4242 {
			t.Fatalf("Kill = %+v, %v; want the survivor reported", res, err)
		}
		assert.Equal(t, f.r.cfg.DefaultGrace+verifyWait, time.Since(start), "the grace, then verification gives up after verifyWait (bubble time)")
	})
}

func TestKillAfterExit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		in, fp := f.start(StartOptions{})
		fp.Exit(env.Exited(7))
		if _, err := f.r.Wait(ctxT(t), in.ID, 0); err != nil {
			t.Fatal(err)
		}
		res, err := f.r.Kill(ctxT(t), in.ID, KillOptions{})
		if err != nil || !res.AlreadyExited || res.Status.Code != 7 || res.State != StateExited || res.Signal != "" {
			t.Fatalf("Kill = %+v %v", res, err)
		}
		if len(fp.Signals()) != 0 {
			t.Fatal("a signal was sent to a finished process")
		}
	})
}

// The process exits between the registry's look and the signal: the
// backend says ErrExited and Kill reports the real status.
func TestKillRacesNaturalExit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		in, fp := f.start(StartOptions{})
		fp.Exit(env.Exited(5)) // exited, but the registry has not seen it yet
		res, err := f.r.Kill(ctxT(t), in.ID, KillOptions{})
		if err != nil || !res.AlreadyExited || res.Status == nil || res.Status.Code != 5 || res.State != StateExited {
			t.Fatalf("Kill = %+v %v", res, err)
		}
	})
}

func TestConcurrentKills(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		f.onStart(func(p *envtest.FakeProcess) { p.Ignore(env.SIGTERM, env.SIGINT, env.SIGHUP) })
		in, fp := f.start(StartOptions{})
		var wg sync.WaitGroup
		results := make([]KillResult, 8)
		for i := range results {
			wg.Go(func() {
				var err error
				results[i], err = f.r.Kill(ctxT(t), in.ID, KillOptions{Grace: 10 * time.Millisecond})
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		killers := 0
		for _, res := range results {
			if !res.AlreadyExited {
				killers++
			}
			if res.State != StateKilled {
				t.Errorf("result %+v", res)
			}
		}
		if killers != 1 {
			t.Fatalf("%d kills reported the kill, want exactly 1: %+v", killers, results)
		}
		if s := fp.Signals(); len(s) != 2 {
			t.Fatalf("signals sent %v, want one TERM and one KILL", s)
		}
	})
}

// A Kill queued behind another kill's grace period gives up when its own
// context ends instead of waiting the grace out.
func TestKillQueuedBehindAnotherHonoursItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, nil)
		f.onStart(func(p *envtest.FakeProcess) { p.Ignore(env.SIGTERM) })
		in, fp := f.start(StartOptions{})
		first := make(chan KillResult, 1)
		go func() {
			res, err := f.r.Kill(context.Background(), in.ID, KillOptions{Grace: time.Minute})
			assert.NoError(t, err)
			first <- res
		}()
		synctest.Wait() // the first kill sent TERM and waits out its grace
		require.Equal(t, []env.Signal{env.SIGTERM}, fp.Signals())

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		begin := time.Now()
		_, err := f.r.Kill(ctx, in.ID, KillOptions{Force: true})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(begin), "the queued kill waited for its context, not the grace")
		assert.Equal(t, []env.Signal{env.SIGTERM}, fp.Signals(), "the queued kill sent nothing")

		res := <-first
		assert.True(t, res.Escalated)
		assert.Equal(t, time.Minute, time.Since(begin), "the first kill escalated after its whole grace")
	})
}
