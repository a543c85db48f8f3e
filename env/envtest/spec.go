package envtest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/shellquote"
)

var specCases = []testCase{
	{"DirRoot", testDirRoot},
	{"DirWithSpaceAndQuote", testDirCreated},
	{"EnvValues", testEnvValues},
	{"Invalid", testInvalidSpecs},
	{"Unsupported", testUnsupported},
	{"LongCommand", testLongCommand},
}

// tempDir creates a directory in the sandbox, through e, removed (through
// e) when the test ends.
func (s *suite) tempDir(t *testing.T, e env.Environment) string {
	t.Helper()
	d := strings.TrimSuffix(s.sh(t, e, "mktemp -d"), "\n")
	if !strings.HasPrefix(d, "/") || strings.ContainsAny(d, "\n") {
		t.Fatalf("mktemp -d printed %q, want an absolute path", d)
	}
	t.Cleanup(func() { s.sh(t, e, "rm -rf "+shellquote.Quote(d)) })
	return d
}

func testDirRoot(t *testing.T, s *suite) {
	e := s.newEnv(t)
	out, st := s.run(t, e, env.Spec{Command: "pwd", Dir: "/"})
	if !st.Success() || string(out) != "/\n" {
		t.Errorf("pwd in / = %q, %v; want \"/\\n\", exit status 0", out, st)
	}
}

func testDirCreated(t *testing.T, s *suite) {
	e := s.newEnv(t)
	base := s.tempDir(t, e)
	// Ask the sandbox for the physical path, so a symlinked /tmp (macOS)
	// does not make the comparison fail.
	dir := strings.TrimSuffix(s.sh(t, e, "d="+shellquote.Quote(base+`/a b'c $x`)+` && mkdir "$d" && cd "$d" && pwd -P`), "\n")
	out, st := s.run(t, e, env.Spec{Command: "pwd -P", Dir: dir})
	if !st.Success() || string(out) != dir+"\n" {
		t.Errorf("pwd -P = %q, %v; want %q, exit status 0", out, st, dir+"\n")
	}
}

func testEnvValues(t *testing.T, s *suite) {
	e := s.newEnv(t)
	tricky := "it's \"quoted\" $(echo INJECTED) `echo BACKTICK` $HOME ; echo X \\n\\\\ *\nsecond line\t\ttabs = equals\n"
	out, st := s.run(t, e, env.Spec{
		Command: `printf '%s|' "$FOO" "$BAR" "${EMPTY-unset}" "$lower_case1"`,
		Env: []string{
			"FOO=overridden",
			"FOO=" + tricky, // later entries win
			"BAR=a=b=c",
			"EMPTY=",
			"lower_case1=ok",
		},
	})
	want := tricky + "|a=b=c||ok|"
	if !st.Success() || string(out) != want {
		t.Errorf("environment seen by the process = %q, %v;\nwant %q", out, st, want)
	}
}

// testInvalidSpecs: every bad spec is refused before anything runs.
func testInvalidSpecs(t *testing.T, s *suite) {
	e := s.newEnv(t)
	caps := e.Capabilities()
	dir := s.tempDir(t, e)
	s.sh(t, e, "echo > "+shellquote.Quote(dir+"/plain-file"))
	sentinel := dir + "/started"
	// If the backend ran any of these, the sentinel file appears.
	mark := "echo started >> " + shellquote.Quote(sentinel)
	type badSpec struct {
		name   string
		spec   env.Spec
		field  string
		dirErr bool
	}
	cases := []badSpec{
		{"MissingDir", env.Spec{Command: mark, Dir: dir + "/does-not-exist"}, "Dir", true},
		{"DirIsAFile", env.Spec{Command: mark, Dir: dir + "/plain-file"}, "Dir", true},
		{"EmptyCommand", env.Spec{Command: ""}, "Command", false},
		{"BlankCommand", env.Spec{Command: " \t\n "}, "Command", false},
		{"NULInCommand", env.Spec{Command: mark + "\x00"}, "Command", false},
		{"EnvNameWithDash", env.Spec{Command: mark, Env: []string{"FO-O=x"}}, "Env", false},
		{"EnvNameLeadingDigit", env.Spec{Command: mark, Env: []string{"1FOO=x"}}, "Env", false},
		{"EnvEmptyName", env.Spec{Command: mark, Env: []string{"=x"}}, "Env", false},
		{"EnvNoEquals", env.Spec{Command: mark, Env: []string{"FOO"}}, "Env", false},
		{"EnvNameInjection", env.Spec{Command: mark, Env: []string{"X;touch /tmp/x;Y=1"}}, "Env", false},
		{"BadTag", env.Spec{Command: mark, Tag: "no spaces allowed"}, "Tag", false},
	}
	if caps.PTY {
		cases = append(cases, badSpec{"ZeroPTYSize", env.Spec{Command: mark, PTY: &env.WindowSize{}}, "PTY", false})
	}
	for _, c := range cases {
		p, err := e.Start(s.ctx(t), c.spec)
		if err == nil {
			t.Errorf("%s: Start(%+v) succeeded, want an error matching ErrInvalidSpec", c.name, c.spec)
			s.reap(t, p)
			continue
		}
		if p != nil {
			t.Errorf("%s: Start returned a non-nil Process with its error", c.name)
		}
		if !errors.Is(err, env.ErrInvalidSpec) {
			t.Errorf("%s: error %v does not match ErrInvalidSpec", c.name, err)
		}
		if c.dirErr && !errors.Is(err, env.ErrDirNotFound) {
			t.Errorf("%s: error %v does not match ErrDirNotFound", c.name, err)
		}
		var se *env.SpecError
		if !errors.As(err, &se) {
			t.Errorf("%s: error %v is not a *env.SpecError", c.name, err)
		} else if se.Field != c.field {
			t.Errorf("%s: SpecError.Field = %q, want %q", c.name, se.Field, c.field)
		}
	}
	// A valid spec with the same command works, which also proves the
	// sentinel check below can see a start.
	s.sh(t, e, mark+" && rm "+shellquote.Quote(sentinel))
	if out := s.sh(t, e, "if [ -e "+shellquote.Quote(sentinel)+" ]; then echo ran; fi"); out != "" {
		t.Errorf("a rejected spec ran anyway (sentinel file exists)")
	}
}

func testUnsupported(t *testing.T, s *suite) {
	e := s.newEnv(t)
	caps := e.Capabilities()
	if caps.TreeKill == "" {
		t.Errorf("Capabilities.TreeKill is empty; name the mechanism")
	}
	if caps.Resize && !caps.PTY {
		t.Errorf("Capabilities: Resize without PTY")
	}
	if caps.ReattachPTY && !(caps.PTY && caps.Reattach) {
		t.Errorf("Capabilities: ReattachPTY without PTY and Reattach")
	}
	if e.Name() == "" {
		t.Errorf("Name() is empty")
	}
	if !caps.Reattach {
		p, err := e.Start(s.ctx(t), env.Spec{Command: "exit 0", Detach: true})
		if !errors.Is(err, env.ErrUnsupported) {
			t.Errorf("Start with Detach on a backend without Reattach = %v, want ErrUnsupported", err)
		}
		if p != nil {
			s.reap(t, p)
		}
	}
	if !caps.PTY {
		p, err := e.Start(s.ctx(t), env.Spec{Command: "exit 0", PTY: &env.WindowSize{Rows: 24, Cols: 80}})
		if !errors.Is(err, env.ErrUnsupported) {
			t.Errorf("Start with a PTY on a backend without PTY = %v, want ErrUnsupported", err)
		}
		if p != nil {
			s.reap(t, p)
		}
	}
	if !caps.Stdin {
		p, err := e.Start(s.ctx(t), env.Spec{Command: "exit 0", Stdin: true})
		if !errors.Is(err, env.ErrUnsupported) {
			t.Errorf("Start with Stdin on a backend without stdin = %v, want ErrUnsupported", err)
		}
		if p != nil {
			s.reap(t, p)
		}
	}
	// Resize needs a PTY.
	m := NewMarker()
	s.killMarkedAtCleanup(t, e, m)
	p := s.start(t, e, env.Spec{Command: "sleep " + m})
	if err := p.Resize(s.ctx(t), env.WindowSize{Rows: 30, Cols: 100}); !errors.Is(err, env.ErrUnsupported) {
		t.Errorf("Resize without a PTY = %v, want ErrUnsupported", err)
	}
}

// testLongCommand: a command longer than Linux lets one argument be (128
// KiB; an agent writing a file with a heredoc) runs, and one of 5 MiB too:
// it sees what a short command sees ($0, no arguments, its stdin, no
// extra descriptor) and ends with its own exit status, detached or not,
// on a terminal too. See env.InlineCommandMax.
func testLongCommand(t *testing.T, s *suite) {
	e := s.newEnv(t)
	caps := e.Capabilities()
	// What a short command sees, to compare with.
	probe := `printf '%s|%s|' "$0" "$#"; if [ -e /dev/fd/3 ]; then printf 'fd3|'; fi; `
	if caps.Stdin {
		probe += `read -r line; printf 'stdin:%s|' "$line"; `
	}
	run := func(command string, detach bool) (string, env.ExitStatus) {
		t.Helper()
		p := s.start(t, e, env.Spec{Command: command, Stdin: caps.Stdin, Detach: detach})
		if caps.Stdin {
			if _, err := p.Write(s.ctx(t), []byte("fed\n")); err != nil {
				t.Fatalf("Write: %v", err)
			}
			if err := p.CloseStdin(s.ctx(t)); err != nil {
				t.Fatalf("CloseStdin: %v", err)
			}
		}
		out, err := ReadAll(s.ctx(t), p)
		if err != nil {
			t.Fatalf("reading the output of a %d-byte command: %v (got %q)", len(command), err, clip(out))
		}
		return string(out), s.wait(t, p)
	}
	detach := []bool{false}
	if caps.Reattach {
		detach = append(detach, true)
	}
	for _, d := range detach {
		want, st := run(probe+"exit 7", d)
		if st.Code != 7 {
			t.Fatalf("short probe (detach %v): %v, output %q; want exit status 7", d, st, want)
		}
		for _, size := range []int{200 << 10, 5 << 20} {
			line := strings.Repeat("0123456789abcdef", 4)[:63] + "\n"
			command := "wc -c <<'CORRAL_EOF' | tr -d ' '\n" + strings.Repeat(line, size/64) + "CORRAL_EOF\n" + probe + "exit 7"
			out, st := run(command, d)
			wantOut := strconv.Itoa(size/64*64) + "\n" + want
			if st.Code != 7 || out != wantOut {
				t.Errorf("a %d-byte command (detach %v): %v, output %q; want exit status 7, output %q", len(command), d, st, clip([]byte(out)), wantOut)
			}
		}
	}
	if !s.cfg.PTY || !caps.PTY {
		return
	}
	// On a terminal: the output comes through the terminal (CR LF).
	command := "wc -c <<'CORRAL_EOF' | tr -d ' '\n" + strings.Repeat(strings.Repeat("x", 99)+"\n", 3000) + "CORRAL_EOF\nexit 7"
	detach = []bool{false}
	if caps.ReattachPTY {
		detach = append(detach, true)
	}
	for _, d := range detach {
		p := s.start(t, e, env.Spec{Command: command, PTY: &env.WindowSize{Rows: 24, Cols: 80}, Detach: d})
		out, err := ReadAll(s.ctx(t), p)
		if err != nil {
			t.Fatalf("reading the output of a long command on a terminal (detach %v): %v (got %q)", d, err, clip(out))
		}
		if st := s.wait(t, p); st.Code != 7 || !strings.Contains(string(out), fmt.Sprint(300000)) {
			t.Errorf("a %d-byte command on a terminal (detach %v): %v, output %q; want exit status 7, output 300000", len(command), d, st, clip(out))
		}
	}
}
