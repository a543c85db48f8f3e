package envtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/shellquote"
)

var reattachCases = []testCase{
	{"WhileRunning", func(t *testing.T, s *suite) { testReattach(t, s, reattachRunning) }},
	{"AfterExitUnattached", func(t *testing.T, s *suite) { testReattach(t, s, reattachAfterExit) }},
	{"AndKillTree", func(t *testing.T, s *suite) { testReattach(t, s, reattachKill) }},
	{"FindByTag", testFindByTag},
}

type reattachMode int

const (
	reattachRunning   reattachMode = iota // attach, then let it finish
	reattachAfterExit                     // let it finish while nobody is attached, then attach
	reattachKill                          // attach, then kill its tree through the new handle
)

// testReattach starts a detached process with one Environment, reads part
// of its output, drops the handle and the Environment, and picks the
// process up again from a JSON round-tripped Ref in a new Environment (the
// same one with Config.OwnSandbox).
func testReattach(t *testing.T, s *suite, mode reattachMode) {
	e1 := s.newEnv(t)
	if !e1.Capabilities().Reattach {
		t.Skip("Capabilities.Reattach is false")
	}
	m := newMarkers(2) // the shell itself (in its command line), a background child
	s.killMarkedAtCleanup(t, e1, m...)
	part1, part2 := numberedLines(0, 2000), numberedLines(2000, 4000)
	// The gate file lets the test decide when the second part is written;
	// the process makes (and removes) its own private directory for it.
	script := fmt.Sprintf(`d=$(mktemp -d) || exit 99
: %s
sleep %s &
echo "gate=$d/go"
%s
while [ ! -e "$d/go" ]; do sleep 0.2 2>/dev/null || sleep 1; done
rm -rf "$d"
%s
kill $!
exit 5`, m[0], m[1], numberedLinesCommand(0, 2000), numberedLinesCommand(2000, 4000))
	p1 := s.start(t, e1, env.Spec{Command: script, Detach: true})
	w := s.watch(t, p1, 0)
	head := s.waitFor(t, w, "line 1999\n")
	gateLine, rest, _ := strings.Cut(string(head), "\n")
	gate, ok := strings.CutPrefix(gateLine, "gate=")
	if !ok || !strings.HasPrefix(gate, "/") || rest != string(part1) {
		t.Fatalf("first part of the output = %q, want gate=/... and %d numbered lines", clip(head), 2000)
	}
	want := append([]byte(gateLine+"\n"), part1...)
	want = append(want, part2...)
	head1 := len(gateLine) + 1 + len(part1)

	ref, err := p1.Ref()
	if err != nil {
		t.Fatalf("Ref of a detached process: %v", err)
	}
	if ref.Env != e1.Name() {
		t.Errorf("Ref.Env = %q, want the Environment's Name %q", ref.Env, e1.Name())
	}
	js, err := json.Marshal(ref)
	if err != nil {
		t.Fatalf("marshal Ref: %v", err)
	}
	var ref2 env.Ref
	if err := json.Unmarshal(js, &ref2); err != nil {
		t.Fatalf("unmarshal Ref %s: %v", js, err)
	}
	w.Close()
	if err := p1.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	e2 := s.reopen(t, e1)
	s.killMarkedAtCleanup(t, e2, m...)
	// Detached processes outlive the Environment that started them.
	s.waitProcs(t, e2, true, m...)
	if mode == reattachAfterExit {
		s.sh(t, e2, "touch "+shellquote.Quote(gate))
		s.waitProcs(t, e2, false, m...)
	}
	p2, err := e2.Attach(s.ctx(t), ref2)
	if err != nil {
		t.Fatalf("Attach(%s): %v", js, err)
	}
	if p2 == nil {
		t.Fatalf("Attach returned a nil Process and no error")
	}
	t.Cleanup(func() { s.reap(t, p2) })

	if mode == reattachKill {
		if err := p2.Signal(s.ctx(t), env.SIGKILL); err != nil {
			t.Fatalf("Signal(KILL) through the attached handle: %v", err)
		}
		if st := s.wait(t, p2); st != env.Signaled(env.SIGKILL) {
			t.Errorf("status = %v, want killed by KILL", st)
		}
		s.waitProcs(t, e2, false, m...)
		s.waitNoSurvivors(t, p2)
		if got, err := ReadAll(s.ctx(t), p2); err != nil || !bytes.Equal(got, want[:head1]) {
			t.Errorf("output after the kill = %d bytes, %v; want the %d bytes written before it", len(got), err, head1)
		}
		s.sh(t, e2, "rm -rf "+shellquote.Quote(strings.TrimSuffix(gate, "/go")))
		return
	}

	var w0, wOff *Watcher
	off := int64(head1 - 5)
	if mode == reattachRunning {
		// Streams opened before the rest is written must continue live.
		w0, wOff = s.watch(t, p2, 0), s.watch(t, p2, off)
		if _, err := w0.WaitLen(s.ctx(t), head1); err != nil {
			t.Fatalf("attached output from 0: %v", err)
		}
		s.sh(t, e2, "touch "+shellquote.Quote(gate))
	}
	if st := s.wait(t, p2); st != env.Exited(5) {
		t.Errorf("status through the attached handle = %v, want exit status 5", st)
	}
	if w0 != nil {
		if got := s.waitEOF(t, w0); !bytes.Equal(got, want) {
			t.Errorf("attached stream from 0: %d bytes, want %d (%q)", len(got), len(want), clip(got))
		}
		if got := s.waitEOF(t, wOff); !bytes.Equal(got, want[off:]) {
			t.Errorf("attached stream from %d: %d bytes starting %q, want %d starting %q", off, len(got), clip(got[:min(len(got), 40)]), int64(len(want))-off, want[off:off+40])
		}
	}
	s.checkOffsets(t, p2, want)
	// A second Wait (and a second Attach) see the same end.
	if st := s.wait(t, p2); st != env.Exited(5) {
		t.Errorf("second Wait = %v, want exit status 5", st)
	}
	p3, err := e2.Attach(s.ctx(t), ref2)
	if err != nil {
		t.Fatalf("second Attach after the exit: %v", err)
	}
	t.Cleanup(func() { s.reap(t, p3) })
	if st := s.wait(t, p3); st != env.Exited(5) {
		t.Errorf("Wait through a second attached handle = %v, want exit status 5", st)
	}
	if err := p3.Release(); err != nil {
		t.Errorf("Release: %v", err)
	}

	if err := p2.Remove(s.ctx(t)); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	p4, err := e2.Attach(s.ctx(t), ref2)
	if !errors.Is(err, env.ErrNotFound) {
		t.Errorf("Attach after Remove = %v, want ErrNotFound", err)
	}
	if p4 != nil {
		s.reap(t, p4)
	}
}
