package envtest

import (
	"fmt"
	"testing"

	"github.com/corralhq/corral/env"
)

// testFindByTag: where the Environment is an env.TagFinder, a second
// Environment (the same one with Config.OwnSandbox) finds a detached
// process by its Spec.Tag after its handle was dropped, as a supervisor
// that died during Start never had it, and only that process; the handle
// it gets ends the whole tree.
func testFindByTag(t *testing.T, s *suite) {
	e1 := s.newEnv(t)
	if !e1.Capabilities().Reattach {
		t.Skip("Capabilities.Reattach is false")
	}
	if _, ok := e1.(env.TagFinder); !ok {
		t.Skip("the Environment is not an env.TagFinder")
	}
	m := newMarkers(3)
	s.killMarkedAtCleanup(t, e1, m...)
	tag := "envtest_tag_" + m[0]
	p := s.start(t, e1, env.Spec{Command: fmt.Sprintf("sleep %s & sleep %s", m[0], m[1]), Detach: true, Tag: tag})
	pid := p.PID()
	if err := p.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	q := s.start(t, e1, env.Spec{Command: "sleep " + m[2], Detach: true, Tag: tag + "_other"})
	t.Cleanup(func() { s.reap(t, q) })
	s.waitProcs(t, e1, true, m...)

	e2 := s.reopen(t, e1)
	s.killMarkedAtCleanup(t, e2, m...)
	found, err := e2.(env.TagFinder).Tagged(s.ctx(t), []string{tag, "envtest_tag_nobody"})
	if err != nil {
		t.Fatalf("Tagged: %v", err)
	}
	if len(found) != 1 || len(found[tag]) != 1 {
		t.Fatalf("Tagged found %v, want one process under %s", found, tag)
	}
	h := found[tag][0]
	t.Cleanup(func() { s.reap(t, h) })
	if h.PID() != pid {
		t.Errorf("the tagged handle's PID is %d, want %d", h.PID(), pid)
	}
	if err := h.Signal(s.ctx(t), env.SIGKILL); err != nil {
		t.Fatalf("Signal(KILL) through the tagged handle: %v", err)
	}
	s.waitProcs(t, e2, false, m[0], m[1])
	s.waitNoSurvivors(t, h)
	s.waitProcs(t, e2, true, m[2])
}
