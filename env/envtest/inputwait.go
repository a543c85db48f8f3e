package envtest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/shellquote"
)

// The InputWait cases run where the Environment implements
// env.InputWatcher and says so (Capabilities.InputWait). They use only
// the shell, stty and head: a prompt on the stdin pipe and on a terminal
// in each of its modes is flagged with its kind and unflagged once
// answered, and what only looks like a wait never is. The registry adds
// the quiet spell; these cases check the backend's facts, so each look
// is made as soon as the prompt is out.
var inputWaitCases = []testCase{
	{"Pipe", func(t *testing.T, s *suite) {
		s.inputPositive(t, false, `echo Pipe-ready; read v`, "Pipe-ready", env.InputPipe, "bob\n")
	}},
	{"Line", func(t *testing.T, s *suite) {
		s.inputPositive(t, true, `printf 'Name? '; read v`, "Name? ", env.InputLine, "bob\n")
	}},
	{"Password", func(t *testing.T, s *suite) {
		s.inputPositive(t, true, `stty -echo; printf 'Secret: '; read v; stty echo`, "Secret: ", env.InputPassword, "hunter2\n")
	}},
	{"Raw", func(t *testing.T, s *suite) {
		s.inputPositive(t, true, `stty raw -echo; printf 'Key? '; head -c 1 >/dev/null; stty sane`, "Key? ", env.InputRaw, "k")
	}},
	{"Vi", testInputVi},
	{"Negatives", testInputNegatives},
}

// testInputVi: vi (busybox's, or vim) showing a file waits for keys on
// its terminal in raw mode, in a poll or a read: raw. Skipped where the
// sandbox has no vi. The answer has no ESC first: busybox vi reads an ESC
// followed at once by more keys as one escape sequence.
func testInputVi(t *testing.T, s *suite) {
	e, _ := s.inputEnv(t, true)
	if strings.TrimSpace(s.sh(t, e, "command -v vi >/dev/null && echo yes || echo no")) != "yes" {
		t.Skip("no vi in the sandbox")
	}
	// HOME in the temp dir: vim writes its viminfo there, where a
	// sandbox's home may be read-only (bwrap), and then asks for ENTER.
	d := shellquote.Quote(s.tempDir(t, e))
	s.inputPositive(t, true, "printf 'VI-LINE\\n' >"+d+"/f.txt; HOME="+d+" TERM=xterm vi "+d+"/f.txt", "VI-LINE", env.InputRaw, ":q!\r")
}

// inputEnv returns a fresh Environment as an env.InputWatcher, or skips;
// pty asks for one with terminals too.
func (s *suite) inputEnv(t *testing.T, pty bool) (env.Environment, env.InputWatcher) {
	t.Helper()
	var e env.Environment
	if pty {
		e = s.ptyEnv(t)
	} else {
		e = s.newEnv(t)
	}
	iw, ok := e.(env.InputWatcher)
	if !ok || !e.Capabilities().InputWait {
		t.Skipf("the Environment (%T) does not tell input waits (Capabilities.InputWait false or no env.InputWatcher)", e)
	}
	return e, iw
}

// inputLook is one InputWaits call for p.
func (s *suite) inputLook(t *testing.T, iw env.InputWatcher, p env.Process) *env.InputWait {
	t.Helper()
	got, err := iw.InputWaits(s.ctx(t), []env.Process{p})
	require.NoError(t, err, "InputWaits")
	require.Len(t, got, 1, "InputWaits gives one entry per process")
	return got[0]
}

// answeredMark is printed once the prompt got its answer; the sleep after
// it keeps the process running, asleep in something that is no wait.
const answeredMark = "ANSWERED-OK"

// inputPositive starts prompt (on a terminal with pty, else with a stdin
// pipe), waits for its output to show ready, and wants it flagged as kind;
// once answer is written, the process goes on and is flagged no more.
func (s *suite) inputPositive(t *testing.T, pty bool, prompt, ready, kind, answer string) {
	e, iw := s.inputEnv(t, pty)
	spec := env.Spec{Command: prompt + "; echo " + answeredMark + "; exec sleep " + newMarkers(1)[0], Stdin: true}
	if pty {
		spec.PTY = &env.DefaultWindowSize
	}
	p := s.start(t, e, spec)
	w := s.watch(t, p, 0)
	s.waitFor(t, w, ready)
	shown := time.Now()
	var got *env.InputWait
	for deadline := time.Now().Add(s.timeout); ; time.Sleep(50 * time.Millisecond) {
		got = s.inputLook(t, iw, p)
		if got != nil || time.Now().After(deadline) {
			break
		}
	}
	require.NotNil(t, got, "a process blocked reading its %s is flagged", map[bool]string{true: "terminal", false: "stdin pipe"}[pty])
	t.Logf("flagged %s %v after the prompt", got.Kind, time.Since(shown).Round(time.Millisecond))
	require.Equal(t, kind, got.Kind)

	_, err := p.Write(s.ctx(t), []byte(answer))
	require.NoError(t, err, "Write")
	s.waitFor(t, w, answeredMark)
	for deadline := time.Now().Add(s.timeout); ; time.Sleep(50 * time.Millisecond) {
		if got = s.inputLook(t, iw, p); got == nil || time.Now().After(deadline) {
			break
		}
	}
	require.Nil(t, got, "answered, the process sleeps: no longer flagged")
}

// testInputNegatives: a sleep, a busy loop and a read of a FIFO that is
// not stdin, with a stdin pipe, and a sleep on a terminal, are never
// flagged, over looks spread across two seconds.
func testInputNegatives(t *testing.T, s *suite) {
	e, iw := s.inputEnv(t, false)
	m := newMarkers(3)
	dir := s.tempDir(t, e)
	procs := []env.Process{
		s.startReadyStdin(t, e, "echo ready; exec sleep "+m[0], nil),
		s.startReadyStdin(t, e, "echo ready; while :; do :; done", nil),
		s.startReadyStdin(t, e, "mkfifo "+shellquote.Quote(dir+"/f")+" && echo ready && read v <"+shellquote.Quote(dir+"/f"), nil),
	}
	if e.Capabilities().PTY && s.cfg.PTY {
		procs = append(procs, s.startReadyStdin(t, e, "echo ready; exec sleep "+m[1], &env.DefaultWindowSize))
	}
	for range 5 {
		got, err := iw.InputWaits(s.ctx(t), procs)
		require.NoError(t, err, "InputWaits")
		require.Len(t, got, len(procs))
		for i, w := range got {
			require.Nil(t, w, "process %d (sleep, busy loop, FIFO read, sleep on a terminal) is no input wait", i)
		}
		time.Sleep(400 * time.Millisecond)
	}
}

// startReadyStdin starts command with a stdin pipe (and a terminal when
// pty is set) and waits for "ready" in its output.
func (s *suite) startReadyStdin(t *testing.T, e env.Environment, command string, pty *env.WindowSize) env.Process {
	t.Helper()
	p := s.start(t, e, env.Spec{Command: command, Stdin: true, PTY: pty})
	s.waitFor(t, s.watch(t, p, 0), "ready")
	return p
}
