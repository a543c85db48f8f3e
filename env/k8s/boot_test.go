package k8s

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runBoot runs a bootstrap under a local shell as the pod's would run: the
// framed script and then stdin on its stdin. It returns stdout, stderr
// without the exit line, and the exit line's code (ok false without one).
func runBoot(t *testing.T, shell []string, boot, script string, stdin io.Reader) (string, string, int, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	head, nonce := frame(script)
	in := head
	if stdin != nil {
		in = io.MultiReader(head, stdin)
	}
	cmd := exec.CommandContext(ctx, shell[0], append(shell[1:], "-c", boot)...)
	var out bytes.Buffer
	var errOut bytes.Buffer
	tail := &exitTail{w: &errOut, nonce: nonce}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, &out, tail
	_ = cmd.Run()
	code, ok := tail.finish()
	return out.String(), errOut.String(), code, ok
}

// shells are the sh implementations of images corral meets: dash
// (Debian), bash and busybox ash (Alpine, busybox images).
func shells(t *testing.T) map[string][]string {
	out := map[string][]string{}
	for _, s := range [][]string{{"dash"}, {"bash"}, {"busybox", "sh"}} {
		if _, err := exec.LookPath(s[0]); err == nil {
			out[strings.Join(s, " ")] = s
		}
	}
	if len(out) == 0 {
		t.Skip("no dash, bash or busybox on this machine")
	}
	return out
}

// TestExecBoot: the script arrives on stdin whole, the rest of stdin is
// the script's, and the exit line carries the script's status however it
// ends (the last command, exit in a function), with stderr intact.
func TestExecBoot(t *testing.T) {
	big := strings.Repeat("# padding line of a long library\n", 6000) // 200 KB, like lib + call
	for name, sh := range shells(t) {
		t.Run(name, func(t *testing.T) {
			out, errOut, code, ok := runBoot(t, sh, execBoot, "echo hi; echo oops >&2; false", nil)
			assert.Equal(t, "hi\n", out)
			assert.Equal(t, "oops\n", errOut)
			assert.True(t, ok)
			assert.Equal(t, 1, code)

			out, _, code, ok = runBoot(t, sh, execBoot, big+"f() { exit 7; }\necho before; f; echo after\n\n\n", nil)
			assert.Equal(t, "before\n", out)
			assert.True(t, ok)
			assert.Equal(t, 7, code)

			out, _, code, ok = runBoot(t, sh, execBoot, "cat; printf '[%s]' \"$corral_x\"", strings.NewReader("payload\x00bytes\nmore"))
			assert.Equal(t, "payload\x00bytes\nmore[]", out, "stdin after the script is the script's, byte for byte")
			assert.True(t, ok)
			assert.Zero(t, code)

			// Stderr that does not end in a newline keeps its last bytes.
			_, errOut, code, ok = runBoot(t, sh, execBoot, "printf 'no newline' >&2; exit 3", nil)
			assert.Equal(t, "no newline", errOut)
			assert.True(t, ok)
			assert.Equal(t, 3, code)
		})
	}
}

// TestExecBootKilledShell: a shell killed outright writes no exit line, so
// the transport cannot mistake it for a success.
func TestExecBootKilledShell(t *testing.T) {
	for name, sh := range shells(t) {
		t.Run(name, func(t *testing.T) {
			_, _, _, ok := runBoot(t, sh, execBoot, "echo x; kill -9 $$", nil)
			assert.False(t, ok)
		})
	}
}

// TestShellBoot: a resident shell's script is read, and the stream after
// it (the engine's calls) is left on stdin.
func TestShellBoot(t *testing.T) {
	for name, sh := range shells(t) {
		t.Run(name, func(t *testing.T) {
			out, _, _, ok := runBoot(t, sh, shellBoot, "while IFS= read -r l; do echo \"got $l\"; done", strings.NewReader("a\nb\n"))
			assert.Equal(t, "got a\ngot b\n", out)
			assert.False(t, ok, "a resident shell reports no exit line")
		})
	}
}

// TestExitTail: only the nonce's line, at the very end, is taken off.
func TestExitTail(t *testing.T) {
	var b bytes.Buffer
	x := &exitTail{w: &b, nonce: "corral-exit-0123"}
	for _, p := range []string{"some ", "stderr\ncorral-exit-0123 ", "4", "2\n"} {
		_, err := x.Write([]byte(p))
		require.NoError(t, err)
	}
	code, ok := x.finish()
	assert.True(t, ok)
	assert.Equal(t, 42, code)
	assert.Equal(t, "some stderr", b.String())

	b.Reset()
	x = &exitTail{w: &b, nonce: "corral-exit-0123"}
	_, _ = x.Write([]byte("corral-exit-9999 0\n"))
	_, ok = x.finish()
	assert.False(t, ok, "another nonce is the script's own output")
	assert.Equal(t, "corral-exit-9999 0\n", b.String())
}
