package envtest

import (
	"errors"
	"testing"

	"github.com/corralhq/corral/env"
)

var lifecycleCases = []testCase{
	{"ReleaseExited", func(t *testing.T, s *suite) { testRelease(t, s, false) }},
	{"ReleaseRunning", func(t *testing.T, s *suite) { testRelease(t, s, true) }},
	{"CloseEnvironment", testCloseEnvironment},
	{"Remove", testRemove},
}

// checkReleased calls every method of a released (or removed) handle and
// expects ErrReleased from each.
func (s *suite) checkReleased(t *testing.T, p env.Process, what string) {
	t.Helper()
	ctx := s.ctx(t)
	check := func(method string, err error) {
		t.Helper()
		if !errors.Is(err, env.ErrReleased) {
			t.Errorf("%s after %s = %v, want ErrReleased", method, what, err)
		}
	}
	rc, err := p.Output(ctx, 0)
	if rc != nil {
		rc.Close()
	}
	check("Output", err)
	_, err = p.Write(ctx, []byte("x"))
	check("Write", err)
	check("CloseStdin", p.CloseStdin(ctx))
	check("Signal", p.Signal(ctx, env.SIGTERM))
	_, err = p.Survivors(ctx)
	check("Survivors", err)
	st, err := p.Wait(ctx)
	check("Wait", err)
	if st != env.NoStatus {
		t.Errorf("Wait after %s returned status %v with its error, want %v", what, st, env.NoStatus)
	}
	check("Resize", p.Resize(ctx, env.WindowSize{Rows: 10, Cols: 10}))
	_, err = p.Ref()
	check("Ref", err)
	check("Remove", p.Remove(ctx))
	if err := p.Release(); err != nil {
		t.Errorf("Release after %s = %v, want nil (idempotent)", what, err)
	}
}

// testRelease: after Release every method says ErrReleased, and the
// process itself is not stopped by it.
func testRelease(t *testing.T, s *suite, running bool) {
	e := s.newEnv(t)
	m := NewMarker()
	s.killMarkedAtCleanup(t, e, m)
	cmd := "exit 0"
	if running {
		cmd = "sleep " + m
	}
	p := s.start(t, e, env.Spec{Command: cmd, Stdin: e.Capabilities().Stdin})
	if running {
		s.waitProcs(t, e, true, m)
	} else {
		s.wait(t, p)
	}
	if err := p.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	s.checkReleased(t, p, "Release")
	if running {
		// Release drops the handle, not the process.
		found, err := ScanProcs(s.ctx(t), e, m)
		if err != nil {
			t.Fatal(err)
		}
		if len(found[m]) == 0 {
			t.Errorf("the process (sleep %s) is gone after Release; Release must not stop it", m)
		}
	}
}

func testCloseEnvironment(t *testing.T, s *suite) {
	e := s.newEnv(t)
	s.sh(t, e, "exit 0")
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Errorf("second Close = %v, want nil (idempotent)", err)
	}
	p, err := e.Start(s.ctx(t), env.Spec{Command: "exit 0"})
	if !errors.Is(err, env.ErrReleased) {
		t.Errorf("Start after Close = %v, want ErrReleased", err)
	}
	if p != nil {
		s.reap(t, p)
	}
	p, err = e.Attach(s.ctx(t), env.Ref{Env: e.Name(), Data: []byte(`{}`)})
	if !errors.Is(err, env.ErrReleased) {
		t.Errorf("Attach after Close = %v, want ErrReleased", err)
	}
	if p != nil {
		s.reap(t, p)
	}
}

// testRemove: Remove refuses while the process runs (and leaves it
// running and usable), works after the exit, releases the handle, and the
// process can no longer be attached.
func testRemove(t *testing.T, s *suite) {
	e := s.newEnv(t)
	caps := e.Capabilities()
	m := NewMarker()
	s.killMarkedAtCleanup(t, e, m)
	p := s.start(t, e, env.Spec{Command: "echo hi; sleep " + m, Detach: caps.Reattach})
	s.waitProcs(t, e, true, m)
	if err := p.Remove(s.ctx(t)); err == nil {
		t.Fatalf("Remove of a running process succeeded, want an error")
	}
	s.waitProcs(t, e, true, m)
	if err := p.Signal(s.ctx(t), env.SIGKILL); err != nil {
		t.Fatalf("Signal(KILL) after the refused Remove: %v (the handle must still work)", err)
	}
	if st := s.wait(t, p); st != env.Signaled(env.SIGKILL) {
		t.Errorf("status = %v, want killed by KILL", st)
	}
	if out, err := ReadAll(s.ctx(t), p); err != nil || string(out) != "hi\n" {
		t.Errorf("output after the refused Remove = %q, %v; want \"hi\\n\"", out, err)
	}
	var ref env.Ref
	if caps.Reattach {
		var err error
		if ref, err = p.Ref(); err != nil {
			t.Fatalf("Ref of a detached process: %v", err)
		}
	}
	if err := p.Remove(s.ctx(t)); err != nil {
		t.Fatalf("Remove after the exit: %v", err)
	}
	s.checkReleased(t, p, "Remove")
	if !caps.Reattach {
		return
	}
	q, err := e.Attach(s.ctx(t), ref)
	if !errors.Is(err, env.ErrNotFound) {
		t.Errorf("Attach after Remove = %v, want ErrNotFound", err)
	}
	if q != nil {
		s.reap(t, q)
	}
}
