package shellquote_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/internal/shellquote"
)

// readable is argv -> the command line a person reads for it.
var readable = []struct {
	name  string
	words []string
	want  string
}{
	{"plain words stay bare", []string{"python3", "-m", "http.server", "8000"}, "python3 -m http.server 8000"},
	{"a space", []string{"echo", "a b"}, "echo 'a b'"},
	{"a script for sh -c", []string{"sh", "-c", "sleep 1; echo x"}, "sh -c 'sleep 1; echo x'"},
	{"a quote alone: double quotes", []string{"echo", "it's"}, `echo "it's"`},
	{"a quote and a dollar", []string{"echo", "it's $HOME"}, `echo 'it'\''s $HOME'`},
	{"a script with quotes and escapes", []string{"sh", "-c", `printf '\033[1m%s\n' x; sleep 1`}, `sh -c "printf '\033[1m%s\n' x; sleep 1"`},
	{"a quote and an escaping backslash", []string{"echo", `it's \\`}, `echo 'it'\''s \\'`},
	{"a quote and a last backslash", []string{"echo", `it's\`}, `echo 'it'\''s\'`},
	{"a quote and a newline after a backslash", []string{"echo", "it's\\\nx"}, "echo 'it'\\''s\\\nx'"},
	{"double quotes inside", []string{"git", "commit", "-m", `say "hi"`}, `git commit -m 'say "hi"'`},
	{"a dollar", []string{"echo", "$HOME"}, "echo '$HOME'"},
	{"a command substitution", []string{"echo", "$(id) `id`"}, "echo '$(id) `id`'"},
	{"a glob", []string{"ls", "*.go"}, "ls '*.go'"},
	{"braces", []string{"echo", "{a,b}"}, "echo '{a,b}'"},
	{"the empty string", []string{"printf", "", "x"}, "printf '' x"},
	{"unicode letters stay bare", []string{"echo", "日本語", "é"}, "echo 日本語 é"},
	{"unicode with a space", []string{"echo", "é ü 日本"}, "echo 'é ü 日本'"},
	{"a non-breaking space", []string{"echo", "a\u00a0b"}, "echo 'a\u00a0b'"},
	{"a newline stays inside the quotes", []string{"printf", "a\nb"}, "printf 'a\nb'"},
	{"a tab", []string{"printf", "a\tb"}, "printf 'a\tb'"},
	{"not UTF-8", []string{"printf", "\xff"}, "printf '\xff'"},
	{"a control byte", []string{"printf", "\x01"}, "printf '\x01'"},
	{"a tilde", []string{"echo", "~", "~/x"}, "echo '~' '~/x'"},
	{"a comment sign", []string{"echo", "#x"}, "echo '#x'"},
	{"a backslash", []string{"echo", `a\b`}, `echo 'a\b'`},
	{"a redirection", []string{"echo", "a>b", "2>&1"}, "echo 'a>b' '2>&1'"},
	{"an assignment as the command name", []string{"FOO=bar", "x"}, "'FOO=bar' x"},
	{"an assignment as an argument", []string{"env", "FOO=bar", "cmd"}, "env FOO=bar cmd"},
	{"a reserved word as the command name", []string{"if", "x"}, "'if' x"},
	{"a reserved word as an argument", []string{"echo", "if", "time"}, "echo if time"},
	{"options and paths", []string{"curl", "-fsS", "--max-time=3", "http://127.0.0.1:8080/a,b@c%20+d"}, "curl -fsS --max-time=3 http://127.0.0.1:8080/a,b@c%20+d"},
	{"none", nil, ""},
}

func TestReadable(t *testing.T) {
	for _, tt := range readable {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, shellquote.Readable(tt.words))
		})
	}
}

// TestReadableThroughShell: what is shown means what runs: a real shell
// splits it back into exactly the words.
func TestReadableThroughShell(t *testing.T) {
	cases := append([][]string{}, hostile)
	for _, tt := range readable {
		cases = append(cases, tt.words)
	}
	for _, words := range cases {
		line := shellquote.Readable(append([]string{"printf", `<%s>\n`}, words...))
		out, err := exec.Command("/bin/sh", "-c", line).Output()
		require.NoError(t, err, line)
		var want strings.Builder
		for _, w := range words {
			want.WriteString("<" + w + ">\n")
		}
		if len(words) == 0 {
			want.WriteString("<>\n")
		}
		assert.Equal(t, want.String(), string(out), line)
	}
}

// TestReadableCommandName: a first word that a shell would read as an
// assignment or a keyword is run as the command of that name.
func TestReadableCommandName(t *testing.T) {
	for _, name := range []string{"FOO=bar", "if", "!", "{"} {
		line := shellquote.Readable([]string{name})
		out, err := exec.Command("/bin/sh", "-c", line+" 2>&1").Output()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%s ran: %s", line, out)
		assert.Equal(t, 127, ee.ExitCode(), "%s: %s", line, out)
	}
}

// TestDisplay: a line Join wrote reads as Readable writes its words; a
// line typed as one string is shown as typed unless it is a plain list
// of literal words.
func TestDisplay(t *testing.T) {
	for _, tt := range readable {
		t.Run("joined "+tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, shellquote.Display(shellquote.Join(tt.words)))
		})
	}
	for line, want := range map[string]string{
		"":                                     "",
		"python3 -m http.server 8000":          "python3 -m http.server 8000",
		"sleep 1; echo x":                      "sleep 1; echo x",
		"sh -c 'sleep 1; echo x'":              "sh -c 'sleep 1; echo x'",
		"make test 2>&1 | tail":                "make test 2>&1 | tail",
		`echo "a b"`:                           `echo "a b"`,
		"echo $HOME":                           "echo $HOME",
		"ls *.go":                              "ls *.go",
		"FOO=bar cmd":                          "FOO=bar cmd",
		"FOO='x y' cmd":                        "FOO='x y' cmd",
		"time sleep 1":                         "time sleep 1",
		"echo a\necho b":                       "echo a\necho b",
		"echo 'unterminated":                   "echo 'unterminated",
		`echo a\ b`:                            `echo a\ b`,
		"echo 'hello'   world":                 "echo hello world",
		"exec 'printf' '%s|' 'a b' 'it'\\''s'": `exec printf '%s|' 'a b' "it's"`,
		"'FOO=bar' 'x'":                        "'FOO=bar' x",
	} {
		assert.Equal(t, want, shellquote.Display(line), "%q", line)
	}
}
