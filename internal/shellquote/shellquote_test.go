package shellquote_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/internal/shellquote"
)

// hostile are strings a shell would interpret if they were not quoted, or
// quoted wrongly.
var hostile = []string{
	"", "plain", "it's", "''", "'", `"double"`, "$HOME $(id) `id`", "a\nb\tc", "\\", "\\'",
	"/tmp/a; touch /tmp/pwned #", "*", "-n", "é ü 日本", "\x01\x7f", "\xff\xfe not UTF-8",
	"FOO=bar", "if", "~", "a b", "!", "{a,b}", "#comment",
}

func TestQuoteText(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"", `''`},
		{"plain", `'plain'`},
		{"it's", `'it'\''s'`},
		{"'", `''\'''`},
		{"''", `''\'''\'''`},
		{"$HOME", `'$HOME'`},
		{"a\nb", "'a\nb'"},
		{"FOO=bar", `'FOO=bar'`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			assert.Equal(t, tt.want, shellquote.Quote(tt.in))
		})
	}
}

// TestQuoteThroughShell: a real shell must give back every byte sequence
// literally.
func TestQuoteThroughShell(t *testing.T) {
	for _, s := range hostile {
		t.Run(s, func(t *testing.T) {
			out, err := exec.Command("/bin/sh", "-c", "printf %s "+shellquote.Quote(s)).Output()
			require.NoError(t, err, "sh -c printf %%s %s", shellquote.Quote(s))
			assert.Equal(t, s, string(out))
		})
	}
}

// TestQuoteNestedShell: a quoted script quoted again survives two shells,
// as a script sent over SSH meets the remote login shell and then /bin/sh.
func TestQuoteNestedShell(t *testing.T) {
	for _, s := range hostile {
		t.Run(s, func(t *testing.T) {
			inner := "printf %s " + shellquote.Quote(s)
			out, err := exec.Command("/bin/sh", "-c", "/bin/sh -c "+shellquote.Quote(inner)).Output()
			require.NoError(t, err)
			assert.Equal(t, s, string(out))
		})
	}
}

func TestJoin(t *testing.T) {
	tests := []struct {
		name  string
		words []string
		want  string
	}{
		{"none", nil, ""},
		{"one", []string{"echo"}, `'echo'`},
		{"several", []string{"sh", "-c", "echo hi; exit 3"}, `'sh' '-c' 'echo hi; exit 3'`},
		{"empty word kept", []string{"printf", "", "x"}, `'printf' '' 'x'`},
		{"quote inside", []string{"echo", "it's"}, `'echo' 'it'\''s'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, shellquote.Join(tt.words))
		})
	}
}

// TestJoinThroughShell: the shell splits a joined line back into exactly
// the original words, one argument each.
func TestJoinThroughShell(t *testing.T) {
	words := append([]string{"printf", `<%s>\n`}, hostile...)
	out, err := exec.Command("/bin/sh", "-c", shellquote.Join(words)).Output()
	require.NoError(t, err)
	var want strings.Builder
	for _, w := range hostile {
		want.WriteString("<" + w + ">\n")
	}
	assert.Equal(t, want.String(), string(out))
}
