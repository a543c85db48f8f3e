package envtest

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/corralhq/corral/env"
)

var stdinCases = []testCase{
	{"WriteThenClose", testStdinWriteClose},
	{"Interactive", testStdinInteractive},
	{"WriteAfterClose", testStdinWriteAfterClose},
	{"WriteAfterExit", testStdinWriteAfterExit},
	{"NoStdinReadsEOF", testNoStdin},
}

func needStdin(t *testing.T, e env.Environment) {
	t.Helper()
	if !e.Capabilities().Stdin {
		t.Skip("Capabilities.Stdin is false")
	}
}

// testStdinWriteClose: 1 MiB written in pieces, then closed: wc sees every
// byte and ends because it read EOF.
func testStdinWriteClose(t *testing.T, s *suite) {
	e := s.newEnv(t)
	needStdin(t, e)
	p := s.start(t, e, env.Spec{Command: "wc -c", Stdin: true})
	chunk := bytes.Repeat([]byte("stdin\x00\xff\n"), 8192) // 64 KiB, binary
	for i := 0; i < 16; i++ {
		n, err := p.Write(s.ctx(t), chunk)
		if err != nil || n != len(chunk) {
			t.Fatalf("Write %d: %d, %v; want %d, nil", i, n, err, len(chunk))
		}
	}
	if err := p.CloseStdin(s.ctx(t)); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	out, err := ReadAll(s.ctx(t), p)
	if err != nil {
		t.Fatal(err)
	}
	if st := s.wait(t, p); !st.Success() {
		t.Errorf("status = %v, want exit status 0", st)
	}
	if got := strings.TrimSpace(string(out)); got != "1048576" {
		t.Errorf("wc -c = %q, want 1048576", got)
	}
}

// testStdinInteractive: a line written reaches the process while it runs,
// before stdin is closed.
func testStdinInteractive(t *testing.T, s *suite) {
	e := s.newEnv(t)
	needStdin(t, e)
	p := s.start(t, e, env.Spec{Command: `while read -r line; do echo "got:$line"; done; echo eof`, Stdin: true})
	w := s.watch(t, p, 0)
	for _, line := range []string{"one", "two 'quoted' $(x)"} {
		if _, err := p.Write(s.ctx(t), []byte(line+"\n")); err != nil {
			t.Fatalf("Write: %v", err)
		}
		s.waitFor(t, w, "got:"+line+"\n")
	}
	if err := p.CloseStdin(s.ctx(t)); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	if err := p.CloseStdin(s.ctx(t)); err != nil {
		t.Errorf("second CloseStdin = %v, want nil", err)
	}
	out := s.waitEOF(t, w)
	if want := "got:one\ngot:two 'quoted' $(x)\neof\n"; string(out) != want {
		t.Errorf("output = %q, want %q", out, want)
	}
	if st := s.wait(t, p); !st.Success() {
		t.Errorf("status = %v, want exit status 0", st)
	}
}

func testStdinWriteAfterClose(t *testing.T, s *suite) {
	e := s.newEnv(t)
	needStdin(t, e)
	m := NewMarker()
	s.killMarkedAtCleanup(t, e, m)
	// The process outlives the close, so the error can only come from the
	// closed stdin, not from an exit.
	p := s.start(t, e, env.Spec{Command: "cat >/dev/null; sleep " + m, Stdin: true})
	if err := p.CloseStdin(s.ctx(t)); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	if n, err := p.Write(s.ctx(t), []byte("late\n")); !errors.Is(err, env.ErrStdinClosed) {
		t.Errorf("Write after CloseStdin = %d, %v; want ErrStdinClosed", n, err)
	}
	if err := p.Signal(s.ctx(t), env.SIGKILL); err != nil {
		t.Errorf("Signal(KILL): %v", err)
	}
	s.wait(t, p)
}

func testStdinWriteAfterExit(t *testing.T, s *suite) {
	e := s.newEnv(t)
	needStdin(t, e)
	p := s.start(t, e, env.Spec{Command: "exit 0", Stdin: true})
	s.wait(t, p)
	if n, err := p.Write(s.ctx(t), []byte("late\n")); !errors.Is(err, env.ErrExited) {
		t.Errorf("Write after exit = %d, %v; want ErrExited", n, err)
	}
}

// testNoStdin: without Spec.Stdin the process reads EOF at once, and Write
// says stdin is closed.
func testNoStdin(t *testing.T, s *suite) {
	e := s.newEnv(t)
	m := NewMarker()
	s.killMarkedAtCleanup(t, e, m)
	p := s.start(t, e, env.Spec{Command: "cat; echo cat-exit=$?; sleep " + m})
	w := s.watch(t, p, 0)
	got := s.waitFor(t, w, "\n")
	if string(got) != "cat-exit=0\n" {
		t.Errorf("output = %q, want %q (cat must read EOF at once and print nothing)", got, "cat-exit=0\n")
	}
	if n, err := p.Write(s.ctx(t), []byte("x\n")); !errors.Is(err, env.ErrStdinClosed) {
		t.Errorf("Write without Spec.Stdin = %d, %v; want ErrStdinClosed", n, err)
	}
	if err := p.Signal(s.ctx(t), env.SIGKILL); err != nil {
		t.Errorf("Signal(KILL): %v", err)
	}
	s.wait(t, p)
}
