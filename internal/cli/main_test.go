package cli

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// These tests run corral in process: none may start (or find) a
	// daemon of the machine's user. run goes in process, the others fail.
	os.Setenv(noDaemonEnv, "1")
	os.Setenv("CORRAL_NO_AUTOSTART", "1")
	SetEngine(testEngine)
	goleak.VerifyTestMain(m)
}

// corral runs the command line in-process and returns its exit code,
// stdout and stderr.
func corral(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCommandLineSingleWordIsAShellLine(t *testing.T) {
	got := commandLine([]string{"echo a | tr a b; exit 3"})
	require.Truef(t, got == "echo a | tr a b; exit 3", "commandLine = %q", got)
}

// TestCommandLineRoundTrips runs the joined line through a real /bin/sh and
// checks that every word arrives unchanged, as if exec'd directly.
func TestCommandLineRoundTrips(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("needs /bin/sh")
	}
	words := []string{"printf", "[%s]\\n", "plain", "two words", "it's", `"dq"`, "$HOME", "`id`", "$(id)",
		"back\\slash", "", "*", "a;b", "new\nline", "FOO=bar", "'", "''"}
	line := commandLine(words)
	got, err := exec.Command("/bin/sh", "-c", line).Output()
	require.NoErrorf(t, err, "sh -c %q", line)
	want, err := exec.Command(words[0], words[1:]...).Output()
	require.NoErrorf(t, err, "exec %q", words)
	require.Truef(t, string(got) == string(want), "through the shell:\n%s\nexec'd directly:\n%s\nline: %s", got, want, line)
}

func TestCommandLineFirstWordStaysACommand(t *testing.T) {
	// Unquoted, FOO=bar would be an assignment and the line would run env.
	line := commandLine([]string{"FOO=bar", "env"})
	out, err := exec.Command("/bin/sh", "-c", line+" 2>&1; echo status=$?").Output()
	require.NoError(t, err)
	require.Truef(t, strings.Contains(string(out), "status=127"), "%s ran something: %s", line, out)
}

func TestUsageErrorsExit2WithOneLine(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no subcommand", nil, "missing command"},
		{"unknown subcommand", []string{"rnu"}, "unknown command"},
		{"unknown flag", []string{"run", "--bogus", "--", "true"}, "unknown flag: --bogus"},
		{"bad duration", []string{"run", "--timeout", "soon", "--", "true"}, `invalid argument "soon"`},
		{"negative duration", []string{"run", "--idle-timeout=-1s", "--", "true"}, "--idle-timeout -1s: must not be negative"},
		{"missing command", []string{"run"}, "missing command"},
		{"missing command after --", []string{"run", "--timeout", "1s", "--"}, "missing command"},
		{"env without =", []string{"run", "--env", "FOO", "--", "true"}, `--env "FOO": must be KEY=VALUE`},
		{"env bad name", []string{"run", "--env", "1X=2", "--", "true"}, "variable name"},
		{"allow-env bad name", []string{"run", "--allow-env", "A-B", "--", "true"}, `--allow-env "A-B"`},
		{"unknown backend", []string{"run", "--backend", "nowhere://web", "--", "true"}, `backend "nowhere://web": `},
		{"malformed backend", []string{"run", "--backend", "no where!", "--", "true"}, `backend "no where!" not available: use "local"`},
		{"bad docker target", []string{"run", "--backend", "docker://bad name", "--", "true"}, `--backend "docker://bad name"`},
		{"bad log level", []string{"--log-level", "loud", "version"}, "--log-level"},
		{"version takes no args", []string{"version", "extra"}, "unknown command"},
		{"replace without name", []string{"start", "--replace", "--", "true"}, "--replace needs --name"},
		{"name like an ID prefix", []string{"start", "--name", "cafe", "--", "true"}, "--name: name \"cafe\" could be read as a process ID prefix"},
		{"name with a space", []string{"start", "--name", "my web", "--", "true"}, `--name: name "my web" contains ' '`},
		{"ready port 0", []string{"start", "--ready-port", "0", "--", "true"}, "--ready-port 0: is not a TCP port"},
		{"ready port too large", []string{"start", "--ready-port", "65536", "--", "true"}, "--ready-port 65536: is not a TCP port"},
		{"ready pattern bad", []string{"start", "--ready-pattern", "(", "--", "true"}, `--ready-pattern "(": error parsing regexp`},
		{"ready pattern empty", []string{"start", "--ready-pattern", "", "--", "true"}, "--ready-pattern is empty"},
		{"ready url scheme", []string{"start", "--ready-url", "ftp://h/", "--", "true"}, `--ready-url "ftp://h/": has scheme "ftp"`},
		{"ready url no scheme", []string{"start", "--ready-url", "localhost:3000", "--", "true"}, `--ready-url "localhost:3000"`},
		{"negative ttl", []string{"start", "--ttl=-1s", "--", "true"}, "--ttl -1s: must not be negative"},
		{"negative start idle timeout", []string{"start", "--idle-timeout=-1m", "--", "true"}, "--idle-timeout -1m0s: must not be negative"},
		{"wait ready and tree", []string{"wait", "--ready", "--tree", "web"}, "give one of them"},
		{"kill port 0", []string{"kill", "--port", "0"}, "--port 0: is not a TCP port"},
		{"kill port and ID", []string{"kill", "--port", "3000", "web"}, "give IDs, --all or --port"},
		{"kill port and all", []string{"kill", "--port", "3000", "--all"}, "give IDs, --all or --port"},
		{"kill backend without port", []string{"kill", "--backend", "local", "web"}, "--backend chooses where --port looks"},
		{"kill port bad backend", []string{"kill", "--port", "3000", "--backend", "no where!"}, `backend "no where!" not available`},
		{"ports bad backend", []string{"ports", "--backend", "nowhere://x"}, `backend "nowhere://x": `},
		{"memory not a size", []string{"run", "--memory", "lots", "--", "true"}, `run: --memory "lots": give a size`},
		{"memory too small", []string{"start", "--memory", "1M", "--", "true"}, "start: --memory 1M: must be at least 6M"},
		{"memory empty", []string{"start", "--memory=", "--", "true"}, `start: --memory "": give a size`},
		{"cpus not a number", []string{"run", "--cpus", "two", "--", "true"}, `run: --cpus "two": give a number of cores`},
		{"cpus zero", []string{"start", "--cpus", "0", "--", "true"}, `start: --cpus "0": give a number of cores above 0`},
		{"cpus too many", []string{"run", "--cpus", "5000", "--", "true"}, "run: --cpus 5000: must be between 0.01 and 1024 cores"},
		{"pids fractional", []string{"run", "--pids", "1.5", "--", "true"}, `run: --pids "1.5": give a whole number`},
		{"pids too few", []string{"start", "--pids", "3", "--", "true"}, "start: --pids 3: must be at least 10"},
		{"label without =", []string{"ps", "--label", "team"}, `ps: --label "team": use KEY=VALUE`},
		{"label without key", []string{"kill", "--all", "--label", "=web"}, `kill: --label "=web": use KEY=VALUE`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := corral(t, "", tc.args...)
			assert.Truef(t, code == exitUsage, "exit %d, want %d; stderr %q", code, exitUsage, errOut)
			assert.Truef(t, out == "", "stdout %q, want nothing", out)
			assert.Truef(t, strings.Count(errOut, "\n") == 1 && strings.HasSuffix(errOut, "\n"), "stderr is not exactly one line: %q", errOut)
			assert.Truef(t, strings.HasPrefix(errOut, "corral: ") && strings.Contains(errOut, tc.want), "stderr %q, want corral: ... %q", errOut, tc.want)
		})
	}
}

func TestVersion(t *testing.T) {
	code, out, errOut := corral(t, "", "version")
	require.Truef(t, code == 0 && errOut == "", "exit %d, stderr %q", code, errOut)
	for _, want := range []string{"corral dev\n", "commit: ", "go: " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH} {
		assert.Truef(t, strings.Contains(out, want), "version output lacks %q:\n%s", want, out)
	}
}

func TestVersionFlag(t *testing.T) {
	_, want, _ := corral(t, "", "version")
	code, out, errOut := corral(t, "", "--version")
	require.Truef(t, code == 0 && out == want, "--version: exit %d stdout %q stderr %q, want %q", code, out, errOut, want)
}

func TestVersionLinkTimeValues(t *testing.T) {
	oldV, oldC := version, commit
	t.Cleanup(func() { version, commit = oldV, oldC })
	version, commit = "v1.2.3", "abc1234"
	_, out, _ := corral(t, "", "version")
	require.Truef(t, strings.Contains(out, "corral v1.2.3\ncommit: abc1234"), "version output ignores link-time values:\n%s", out)
}

func TestHelpHasExamples(t *testing.T) {
	code, out, _ := corral(t, "", "run", "--help")
	require.Truef(t, code == 0, "exit %d", code)
	for _, want := range []string{"Examples:", "--idle-timeout", "exits 124", "single-quoted"} {
		assert.Truef(t, strings.Contains(out, want), "run --help lacks %q", want)
	}
}

func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		code, out, errOut := corral(t, "", "completion", shell)
		assert.Truef(t, code == 0 && strings.Contains(out, "corral"), "completion %s: exit %d, stderr %q, %d bytes", shell, code, errOut, len(out))
	}
}

// TestRunInProcess drives `corral run` in-process against the real local
// backend, so goleak (TestMain) also checks that the command's goroutines
// (signal watcher, stdin feeder, registry) are gone when it returns.
func TestRunInProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("uses /bin/sh and the Linux local backend")
	}
	t.Run("exit code and output", func(t *testing.T) {
		code, out, errOut := corral(t, "", "run", "--", "sh", "-c", "echo hi; exit 3")
		require.Truef(t, code == 3 && out == "hi\n" && errOut == "", "exit %d stdout %q stderr %q", code, out, errOut)
	})
	t.Run("stdin", func(t *testing.T) {
		code, out, errOut := corral(t, "abc\n", "run", "--stdin", "--", "tr a-c x-z")
		require.Truef(t, code == 0 && out == "xyz\n", "exit %d stdout %q stderr %q", code, out, errOut)
	})
	t.Run("timeout", func(t *testing.T) {
		code, out, errOut := corral(t, "", "run", "--timeout", "200ms", "--grace", "100ms", "--", "echo before; exec sleep 60")
		require.Truef(t, code == exitTimeout && out == "before\n", "exit %d stdout %q stderr %q, want 124", code, out, errOut)
		require.Truef(t, errOut == "corral: timeout: still running after 200ms; killed the process tree (TERM; 1 process ended)\n", "stderr %q", errOut)
	})
	t.Run("signal", func(t *testing.T) {
		code, _, errOut := corral(t, "", "run", "--", "kill -TERM $$")
		require.Truef(t, code == 128+15 && errOut == "", "exit %d stderr %q, want 143 and nothing on stderr", code, errOut)
	})
}

func TestParseWindowSize(t *testing.T) {
	for _, tc := range []struct {
		in         string
		rows, cols uint16
		ok         bool
	}{
		{"40x120", 40, 120, true},
		{"24X80", 24, 80, true},
		{"1x1", 1, 1, true},
		{"65535x65535", 65535, 65535, true},
		{"0x80", 0, 0, false},
		{"24x0", 0, 0, false},
		{"65536x80", 0, 0, false},
		{"24*80", 0, 0, false},
		{"x80", 0, 0, false},
		{"-1x80", 0, 0, false},
		{"", 0, 0, false},
	} {
		rows, cols, err := parseWindowSize(tc.in)
		assert.Truef(t, (err == nil) == tc.ok && rows == tc.rows && cols == tc.cols, "parseWindowSize(%q) = %d, %d, %v; want %d, %d, ok %v", tc.in, rows, cols, err, tc.rows, tc.cols, tc.ok)
	}
}

// TestOmissionNoticesCoalesced: a follow that falls behind a fast writer
// prints one notice at once and then at most one a second, with the bytes
// left out since, plus what is pending at the end: not one per chunk.
func TestOmissionNoticesCoalesced(t *testing.T) {
	var b strings.Builder
	now := time.Unix(0, 0)
	o := &omissions{w: &b, every: time.Second, now: func() time.Time { return now }}
	o.add(0)
	assert.Empty(t, b.String())
	for range 170 {
		o.add(1000)
		now = now.Add(10 * time.Millisecond) // 1.7 s in all
	}
	o.flush()
	o.flush()
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	assert.Len(t, lines, 3, "%q", b.String())
	assert.Equal(t, "corral: 1000 bytes of output were omitted (once; the reader fell behind)", lines[0])
	var sum int
	for _, l := range lines {
		var n int
		_, err := fmt.Sscanf(l, "corral: %d bytes", &n)
		require.NoError(t, err)
		sum += n
	}
	assert.Equal(t, 170000, sum, "every omitted byte is counted once")
}
