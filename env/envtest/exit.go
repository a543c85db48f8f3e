package envtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/env"
)

var exitCases = []testCase{
	{"Code0", exitCode(0)},
	{"Code1", exitCode(1)},
	{"Code42", exitCode(42)},
	{"Code255", exitCode(255)},
	// 143 is what a shell reports for a child killed by TERM; a process
	// that exits with it must still be reported as an exit, not a signal.
	{"Code143IsNotASignal", exitCode(143)},
	{"SelfTERM", selfSignal(env.SIGTERM)},
	{"SelfKILL", selfSignal(env.SIGKILL)},
	{"SelfINT", selfSignal(env.SIGINT)},
	{"SignalTERM", signalled(env.SIGTERM)},
	{"SignalKILL", signalled(env.SIGKILL)},
	{"SignalINT", signalled(env.SIGINT)},
	{"SignalAfterExit", testSignalAfterExit},
	{"WaitDeadline", testWaitDeadline},
	{"WaitConcurrent", testWaitConcurrent},
	{"KillRacesExit100", testKillRacesExit},
	{"ConcurrentStarts100", testConcurrentStarts},
}

func exitCode(code int) func(t *testing.T, s *suite) {
	return func(t *testing.T, s *suite) {
		e := s.newEnv(t)
		out, st := s.run(t, e, env.Spec{Command: fmt.Sprintf("echo before; exit %d", code)})
		if want := env.Exited(code); st != want {
			t.Errorf("status = %+v (%v), want %+v (%v)", st, st, want, want)
		}
		if string(out) != "before\n" {
			t.Errorf("output = %q, want %q", out, "before\n")
		}
	}
}

func selfSignal(sig env.Signal) func(t *testing.T, s *suite) {
	return func(t *testing.T, s *suite) {
		e := s.newEnv(t)
		// The exit 3 after the kill shows up as a wrong status if the signal
		// did not end the shell.
		_, st := s.run(t, e, env.Spec{Command: fmt.Sprintf("kill -%s $$; exit 3", string(sig))})
		if want := env.Signaled(sig); st != want {
			t.Errorf("status = %+v (%v), want %+v (%v)", st, st, want, want)
		}
	}
}

func signalled(sig env.Signal) func(t *testing.T, s *suite) {
	return func(t *testing.T, s *suite) {
		e := s.newEnv(t)
		m := NewMarker()
		s.killMarkedAtCleanup(t, e, m)
		p := s.start(t, e, env.Spec{Command: exportMarkers([]string{m}) + "echo ready; sleep $M0; exit 3"})
		w := s.watch(t, p, 0)
		s.waitFor(t, w, "ready\n")
		s.waitProcs(t, e, true, m)
		if err := p.Signal(s.ctx(t), sig); err != nil {
			t.Fatalf("Signal(%s): %v", sig, err)
		}
		st := s.wait(t, p)
		if want := env.Signaled(sig); st != want {
			t.Errorf("status = %+v (%v), want %+v (%v)", st, st, want, want)
		}
		if st.Code != -1 {
			t.Errorf("Code = %d for a signalled process, want -1", st.Code)
		}
		s.waitProcs(t, e, false, m)
		if out := s.waitEOF(t, w); string(out) != "ready\n" {
			t.Errorf("output = %q, want %q", out, "ready\n")
		}
	}
}

func testSignalAfterExit(t *testing.T, s *suite) {
	e := s.newEnv(t)
	p := s.start(t, e, env.Spec{Command: "exit 3"})
	if st := s.wait(t, p); st != env.Exited(3) {
		t.Fatalf("status = %v, want exit status 3", st)
	}
	for _, sig := range []env.Signal{env.SIGTERM, env.SIGKILL} {
		if err := p.Signal(s.ctx(t), sig); !errors.Is(err, env.ErrExited) {
			t.Errorf("Signal(%s) after exit = %v, want ErrExited", sig, err)
		}
	}
	if st := s.wait(t, p); st != env.Exited(3) {
		t.Errorf("status after the late signals = %v, want exit status 3", st)
	}
}

// testWaitDeadline: Wait gives up with the context's error while the
// process keeps running; a later Wait still sees the real end.
func testWaitDeadline(t *testing.T, s *suite) {
	e := s.newEnv(t)
	m := NewMarker()
	s.killMarkedAtCleanup(t, e, m)
	p := s.start(t, e, env.Spec{Command: "sleep " + m})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if st, err := p.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) || st != env.NoStatus {
		t.Fatalf("Wait with an expiring context = %v, %v; want %v, context.DeadlineExceeded", st, err, env.NoStatus)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if st, err := p.Wait(cctx); !errors.Is(err, context.Canceled) || st != env.NoStatus {
		t.Fatalf("Wait with a cancelled context = %v, %v; want %v, context.Canceled", st, err, env.NoStatus)
	}
	s.waitProcs(t, e, true, m)
	if err := p.Signal(s.ctx(t), env.SIGKILL); err != nil {
		t.Fatalf("Signal(KILL) after the Wait deadline: %v (the process should still run)", err)
	}
	if st := s.wait(t, p); st != env.Signaled(env.SIGKILL) {
		t.Errorf("status = %v, want killed by KILL", st)
	}
}

// testWaitConcurrent: several goroutines waiting at once all get the same
// status.
func testWaitConcurrent(t *testing.T, s *suite) {
	e := s.newEnv(t)
	p := s.start(t, e, env.Spec{Command: "read x 2>/dev/null; exit 17", Stdin: e.Capabilities().Stdin})
	var wg sync.WaitGroup
	results := make([]env.ExitStatus, 8)
	errs := make([]error, len(results))
	ctx := s.ctx(t)
	for i := range results {
		wg.Go(func() { results[i], errs[i] = p.Wait(ctx) })
	}
	if e.Capabilities().Stdin {
		if err := p.CloseStdin(ctx); err != nil {
			t.Errorf("CloseStdin: %v", err)
		}
	}
	wg.Wait()
	for i := range results {
		if errs[i] != nil || results[i] != env.Exited(17) {
			t.Errorf("waiter %d: %v, %v; want exit status 17", i, results[i], errs[i])
		}
	}
}

// testKillRacesExit: a KILL sent while the process exits by itself never
// panics or hangs, the status is one of the two outcomes, and Signal's
// answer agrees with it.
func testKillRacesExit(t *testing.T, s *suite) {
	e := s.newEnv(t)
	const n, conc = 100, 8
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[string]int{}
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
			defer cancel()
			p, err := e.Start(ctx, env.Spec{Command: "exit 7"})
			if err != nil {
				t.Errorf("round %d: Start: %v", i, err)
				return
			}
			defer p.Release()
			sigErr := make(chan error, 1)
			go func() { sigErr <- p.Signal(ctx, env.SIGKILL) }()
			st, err := p.Wait(ctx)
			serr := <-sigErr
			if err != nil {
				t.Errorf("round %d: Wait: %v", i, err)
				return
			}
			if serr != nil && !errors.Is(serr, env.ErrExited) {
				t.Errorf("round %d: Signal(KILL) = %v, want nil or ErrExited", i, serr)
			}
			switch st {
			case env.Exited(7):
			case env.Signaled(env.SIGKILL):
				if serr != nil {
					t.Errorf("round %d: killed by KILL, but Signal said %v", i, serr)
				}
			default:
				t.Errorf("round %d: status %+v, want exit status 7 or killed by KILL", i, st)
			}
			if errors.Is(serr, env.ErrExited) && st != env.Exited(7) {
				t.Errorf("round %d: Signal said ErrExited, but status is %v", i, st)
			}
			sigResult := "Signal nil"
			if serr != nil {
				sigResult = "Signal ErrExited"
			}
			mu.Lock()
			outcomes[fmt.Sprintf("%v, %s", st, sigResult)]++
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Logf("outcomes: %v", outcomes)
}

func testConcurrentStarts(t *testing.T, s *suite) {
	e := s.newEnv(t)
	const n = 100
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
			defer cancel()
			p, err := e.Start(ctx, env.Spec{Command: fmt.Sprintf("echo out-%d; echo err-%d >&2; exit %d", i, i, i%50)})
			if err != nil {
				t.Errorf("start %d: %v", i, err)
				return
			}
			defer p.Release()
			out, err := ReadAll(ctx, p)
			if err != nil {
				t.Errorf("start %d: %v", i, err)
				return
			}
			st, err := p.Wait(ctx)
			if err != nil {
				t.Errorf("start %d: Wait: %v", i, err)
				return
			}
			if want := fmt.Sprintf("out-%d\nerr-%d\n", i, i); string(out) != want {
				t.Errorf("start %d: output %q, want %q", i, out, want)
			}
			if st != env.Exited(i%50) {
				t.Errorf("start %d: status %v, want exit status %d", i, st, i%50)
			}
		})
	}
	wg.Wait()
}
