package envtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/corralhq/corral/env"
)

// A tree case starts a process whose descendants carry markers, waits until
// every marker shows in the sandbox's process table, kills the tree through
// the Process, and then polls the table until no marker is left. The
// table is read by a new process in the same Environment, never trusted
// from the backend.
type treeShape struct {
	name string
	// markers is how many markers script needs.
	markers int
	// escapes: a process leaves the process group or session, which only a
	// TreeKill mechanism beyond plain process groups catches.
	escapes bool
	// script refers to the markers as $M0, $M1, … (see exportMarkers).
	script string
}

var treeShapes = []treeShape{
	{"Child", 1, false, `sleep $M0 & wait`},
	{"Grandchild", 2, false, `sh -c 'sleep $M0 & sleep $M1; wait' & wait`},
	{"SetsidEscapee", 1, true, `setsid sleep $M0 & wait`},
	{"NohupChild", 1, false, `nohup sleep $M0 >/dev/null 2>&1 & wait`},
	// The daemon's parent exits at once: it is reparented away from the
	// tree (to init or a subreaper) but stays in the process group. The
	// main shell stays, in the foreground sleep $M1.
	{"DoubleForkDaemon", 2, false, `(sh -c 'sleep $M0' &) & sleep $M1`},
	// Every stage of the pipeline blocks forever: yes on the full pipe, the
	// sleeps never read. Only the sleeps carry markers: busybox runs yes
	// as an in-process applet under the forked shell's command line.
	{"Pipeline", 2, false, `yes | sleep $M0 | sleep $M1`},
	// A pipeline started by a setsid escapee.
	{"EscapedPipeline", 2, true, `setsid sh -c 'yes | sleep $M0 | sleep $M1' & wait`},
}

var treeCases = func() []testCase {
	var cs []testCase
	for _, sh := range treeShapes {
		cs = append(cs, testCase{"Kill" + sh.name, func(t *testing.T, s *suite) { s.treeKill(t, s.newEnv(t), sh, nil) }})
	}
	cs = append(cs,
		testCase{"TermIgnored", testTermIgnored},
		testCase{"TermThenKillEverything", testTermThenKill},
	)
	return cs
}()

func skipEscapes(t *testing.T, caps env.Capabilities) {
	t.Helper()
	if caps.TreeKill == "pgroup" || caps.TreeKill == "" {
		t.Skipf("Capabilities.TreeKill = %q: processes that leave the process group are out of reach", caps.TreeKill)
	}
}

// treeKill runs one shape; pty, when non-nil, runs it on a terminal.
func (s *suite) treeKill(t *testing.T, e env.Environment, shape treeShape, pty *env.WindowSize) {
	if shape.escapes {
		skipEscapes(t, e.Capabilities())
	}
	m := newMarkers(shape.markers)
	s.killMarkedAtCleanup(t, e, m...)
	p := s.start(t, e, env.Spec{Command: exportMarkers(m) + shape.script, PTY: pty})
	s.waitProcs(t, e, true, m...)
	surv, err := p.Survivors(s.ctx(t))
	if err != nil {
		t.Fatalf("Survivors while the tree runs: %v", err)
	}
	if len(surv) == 0 {
		t.Errorf("Survivors while the tree runs is empty; want the running processes")
	}
	if err := p.Signal(s.ctx(t), env.SIGKILL); err != nil {
		t.Fatalf("Signal(KILL): %v", err)
	}
	st := s.wait(t, p)
	if st != env.Signaled(env.SIGKILL) {
		t.Errorf("status = %v, want killed by KILL", st)
	}
	s.waitProcs(t, e, false, m...)
	s.waitNoSurvivors(t, p)
}

// waitNoSurvivors polls Survivors until it reports an empty tree: dead
// processes take a moment to be reaped.
func (s *suite) waitNoSurvivors(t *testing.T, p env.Process) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	delay := 20 * time.Millisecond
	for {
		surv, err := p.Survivors(ctx)
		if err != nil {
			t.Fatalf("Survivors after the kill: %v", err)
		}
		if len(surv) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Survivors still %v %v after the kill, although the process table shows none of the tree", surv, s.timeout)
		case <-time.After(delay):
		}
		delay = min(delay*2, 500*time.Millisecond)
	}
}

// testTermIgnored: a process that ignores TERM is still there after TERM
// and ends by KILL.
func testTermIgnored(t *testing.T, s *suite) {
	e := s.newEnv(t)
	m := NewMarker()
	s.killMarkedAtCleanup(t, e, m)
	p := s.start(t, e, env.Spec{Command: exportMarkers([]string{m}) + `trap "" TERM; echo ready; sleep $M0; echo survived; exit 0`})
	w := s.watch(t, p, 0)
	s.waitFor(t, w, "ready\n")
	s.waitProcs(t, e, true, m)
	if err := p.Signal(s.ctx(t), env.SIGTERM); err != nil {
		t.Fatalf("Signal(TERM): %v", err)
	}
	// Signal returned, so the TERM was delivered; the process must still
	// be there, with no exit status yet.
	s.waitProcs(t, e, true, m)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if st, err := p.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("after TERM to a TERM-ignoring process, Wait = %v, %v; want it still running", st, err)
	}
	if err := p.Signal(s.ctx(t), env.SIGKILL); err != nil {
		t.Fatalf("Signal(KILL): %v", err)
	}
	if st := s.wait(t, p); st != env.Signaled(env.SIGKILL) {
		t.Errorf("status = %v, want killed by KILL", st)
	}
	s.waitProcs(t, e, false, m)
	if out := s.waitEOF(t, w); string(out) != "ready\n" {
		t.Errorf("output = %q, want %q", out, "ready\n")
	}
}

// testTermThenKill: the escalation the registry performs. TERM ends the
// plain descendants (escapees too, where TreeKill reaches them) while the
// main process, which traps TERM, and a TERM-ignoring grandchild remain;
// KILL then ends everything.
func testTermThenKill(t *testing.T, s *suite) {
	e := s.newEnv(t)
	escapes := e.Capabilities().TreeKill != "pgroup" && e.Capabilities().TreeKill != ""
	m := newMarkers(5) // child, grandchild, TERM-ignoring, double fork, escapee
	s.killMarkedAtCleanup(t, e, m...)
	if !escapes {
		m = m[:4]
	}
	script := exportMarkers(m) + `trap 'echo term-seen' TERM
sleep $M0 &
sh -c 'sleep $M1 & wait' &
sh -c 'trap "" TERM; sleep $M2' &
(sh -c 'sleep $M3' &) &
`
	if escapes {
		script += "setsid sleep $M4 &\n"
	}
	// The loop keeps the main shell in the foreground of short sleeps, so
	// its trap runs promptly; wait alone would return once the children
	// are gone.
	script += "echo ready\nwhile :; do sleep 1; done\n"
	p := s.start(t, e, env.Spec{Command: script})
	w := s.watch(t, p, 0)
	s.waitFor(t, w, "ready\n")
	s.waitProcs(t, e, true, m...)
	if err := p.Signal(s.ctx(t), env.SIGTERM); err != nil {
		t.Fatalf("Signal(TERM): %v", err)
	}
	s.waitFor(t, w, "term-seen\n")
	gone := []string{m[0], m[1], m[3]}
	if escapes {
		gone = append(gone, m[4])
	}
	s.waitProcs(t, e, false, gone...)
	s.waitProcs(t, e, true, m[2])
	if err := p.Signal(s.ctx(t), env.SIGKILL); err != nil {
		t.Fatalf("Signal(KILL) after TERM: %v (the main process traps TERM and must still run)", err)
	}
	if st := s.wait(t, p); st != env.Signaled(env.SIGKILL) {
		t.Errorf("status = %v, want killed by KILL", st)
	}
	s.waitProcs(t, e, false, m...)
	s.waitNoSurvivors(t, p)
}
