package envtest

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/shellquote"
)

var ptyCases = []testCase{
	{"Size", testPTYSize},
	{"IsATTY", testPTYIsATTY},
	{"ExitCode", testPTYExitCode},
	{"Stdin", testPTYStdin},
	{"Resize", testPTYResize},
	{"KillGrandchild", func(t *testing.T, s *suite) { s.ptyTree(t, "Grandchild") }},
	{"KillDoubleForkDaemon", func(t *testing.T, s *suite) { s.ptyTree(t, "DoubleForkDaemon") }},
	{"KillSetsidEscapee", func(t *testing.T, s *suite) { s.ptyTree(t, "SetsidEscapee") }},
	{"Reattach", testPTYReattach},
}

// ptyEnv returns an Environment for a PTY case, or skips the test.
func (s *suite) ptyEnv(t *testing.T) env.Environment {
	t.Helper()
	if !s.cfg.PTY {
		t.Skip("Config.PTY is false: PTY variants not requested")
	}
	e := s.newEnv(t)
	if !e.Capabilities().PTY {
		t.Skip("Capabilities.PTY is false")
	}
	return e
}

func (s *suite) ptyTree(t *testing.T, shape string) {
	e := s.ptyEnv(t)
	for _, sh := range treeShapes {
		if sh.name == shape {
			s.treeKill(t, e, sh, &env.WindowSize{Rows: 24, Cols: 80})
			return
		}
	}
	t.Fatalf("no tree shape %q", shape)
}

func testPTYSize(t *testing.T, s *suite) {
	e := s.ptyEnv(t)
	out, st := s.run(t, e, env.Spec{Command: "stty size </dev/tty", PTY: &env.WindowSize{Rows: 33, Cols: 101}})
	if !st.Success() || !bytes.Contains(out, []byte("33 101")) {
		t.Errorf("stty size = %q, %v; want \"33 101\", exit status 0", out, st)
	}
}

func testPTYIsATTY(t *testing.T, s *suite) {
	e := s.ptyEnv(t)
	stdin := e.Capabilities().Stdin
	cmd := "test -t 1 && test -t 2 && echo out-is-a-tty"
	if stdin {
		cmd = "test -t 0 && " + cmd
	}
	p := s.start(t, e, env.Spec{Command: cmd, PTY: &env.WindowSize{Rows: 24, Cols: 80}, Stdin: stdin})
	out, err := ReadAll(s.ctx(t), p)
	if err != nil {
		t.Fatal(err)
	}
	if st := s.wait(t, p); !st.Success() || !bytes.Contains(out, []byte("out-is-a-tty")) {
		t.Errorf("%s = %q, %v; want out-is-a-tty, exit status 0", cmd, out, st)
	}
}

func testPTYExitCode(t *testing.T, s *suite) {
	e := s.ptyEnv(t)
	out, st := s.run(t, e, env.Spec{Command: "echo on-tty; exit 42", PTY: &env.WindowSize{Rows: 24, Cols: 80}})
	if st != env.Exited(42) {
		t.Errorf("status = %v, want exit status 42", st)
	}
	// The terminal turns \n into \r\n.
	if !bytes.Contains(out, []byte("on-tty\r\n")) {
		t.Errorf("output = %q, want on-tty\\r\\n", out)
	}
}

func testPTYStdin(t *testing.T, s *suite) {
	e := s.ptyEnv(t)
	if !e.Capabilities().Stdin {
		t.Skip("Capabilities.Stdin is false")
	}
	p := s.start(t, e, env.Spec{Command: `read -r l; echo "got:$l"; exit 3`, PTY: &env.WindowSize{Rows: 24, Cols: 80}, Stdin: true})
	w := s.watch(t, p, 0)
	if _, err := p.Write(s.ctx(t), []byte("typed line\n")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	s.waitFor(t, w, "got:typed line")
	if st := s.wait(t, p); st != env.Exited(3) {
		t.Errorf("status = %v, want exit status 3", st)
	}
}

// testPTYResize: the process learns the new size (SIGWINCH) and the
// terminal reports it.
func testPTYResize(t *testing.T, s *suite) {
	e := s.ptyEnv(t)
	if !e.Capabilities().Resize {
		t.Skip("Capabilities.Resize is false")
	}
	m := NewMarker()
	s.killMarkedAtCleanup(t, e, m)
	// The trap fires only on SIGWINCH, so the new size in the output proves
	// both the resize and the signal. The marker names the shell.
	cmd := fmt.Sprintf(`: %s; trap 'echo "size=$(stty size </dev/tty)"' WINCH; echo ready; while :; do sleep 0.2 2>/dev/null || sleep 1; done`, m)
	p := s.start(t, e, env.Spec{Command: cmd, PTY: &env.WindowSize{Rows: 24, Cols: 80}})
	w := s.watch(t, p, 0)
	s.waitFor(t, w, "ready")
	for _, size := range []env.WindowSize{{Rows: 50, Cols: 132}, {Rows: 7, Cols: 33}} {
		if err := p.Resize(s.ctx(t), size); err != nil {
			t.Fatalf("Resize(%v): %v", size, err)
		}
		s.waitFor(t, w, fmt.Sprintf("size=%d %d", size.Rows, size.Cols))
	}
	if err := p.Signal(s.ctx(t), env.SIGKILL); err != nil {
		t.Fatalf("Signal(KILL): %v", err)
	}
	if st := s.wait(t, p); st != env.Signaled(env.SIGKILL) {
		t.Errorf("status = %v, want killed by KILL", st)
	}
	s.waitProcs(t, e, false, m)
}

// testPTYReattach: a detached process on a terminal is picked up by a new
// Environment; the attached handle resizes its terminal and sees its end.
func testPTYReattach(t *testing.T, s *suite) {
	e1 := s.ptyEnv(t)
	caps := e1.Capabilities()
	if !caps.ReattachPTY {
		t.Skip("Capabilities.ReattachPTY is false")
	}
	m := NewMarker()
	s.killMarkedAtCleanup(t, e1, m)
	// The shell is marked by the no-op ": marker" in its own command line.
	script := fmt.Sprintf(`: %s
d=$(mktemp -d) || exit 99
trap 'echo "size=$(stty size </dev/tty)"' WINCH
echo "gate=$d/go"
while [ ! -e "$d/go" ]; do sleep 0.2 2>/dev/null || sleep 1; done
rm -rf "$d"
exit 4`, m)
	p1 := s.start(t, e1, env.Spec{Command: script, PTY: &env.WindowSize{Rows: 24, Cols: 80}, Detach: true})
	w := s.watch(t, p1, 0)
	head := s.waitFor(t, w, "\n")
	line, _, _ := bytes.Cut(head, []byte("\n"))
	gate, ok := bytes.CutPrefix(bytes.TrimSuffix(line, []byte("\r")), []byte("gate="))
	if !ok {
		t.Fatalf("first line = %q, want gate=...", line)
	}
	ref, err := p1.Ref()
	if err != nil {
		t.Fatalf("Ref: %v", err)
	}
	w.Close()
	if err := p1.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	e2 := s.reopen(t, e1)
	s.killMarkedAtCleanup(t, e2, m)
	p2, err := e2.Attach(s.ctx(t), ref)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	t.Cleanup(func() { s.reap(t, p2) })
	w2 := s.watch(t, p2, 0)
	if caps.Resize {
		if err := p2.Resize(s.ctx(t), env.WindowSize{Rows: 41, Cols: 99}); err != nil {
			t.Fatalf("Resize through the attached handle: %v", err)
		}
		s.waitFor(t, w2, "size=41 99")
	}
	s.sh(t, e2, "touch "+shellquote.Quote(string(gate)))
	if st := s.wait(t, p2); st != env.Exited(4) {
		t.Errorf("status = %v, want exit status 4", st)
	}
	if out := s.waitEOF(t, w2); !bytes.HasPrefix(out, head) {
		t.Errorf("attached output %q does not start with what the first handle read, %q", clip(out), head)
	}
	if err := p2.Remove(s.ctx(t)); err != nil {
		t.Errorf("Remove: %v", err)
	}
}
