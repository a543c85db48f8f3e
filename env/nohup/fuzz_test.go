package nohup_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
	"github.com/corralhq/corral/env/nohup/nohuptest"
)

// fuzzCanary is created by every seed that would run if a value were ever
// interpolated unquoted. The name is unique to this test.
const fuzzCanary = "/tmp/corral-nohup-fuzz-canary-5f1c"

// FuzzScript feeds hostile values through Start into the real scripts (on
// every available shell) and checks that the command line, the working
// directory and an environment value arrive byte for byte, and that the
// canary file is never created. The command's hostile part follows
// "exit 0" on its own line, so it is carried but never parsed.
func FuzzScript(f *testing.F) {
	seeds := []string{
		"plain", "", " ", "'", "''", `"`, `\`, `\'`, "'\\''", "$(touch " + fuzzCanary + ")",
		"`touch " + fuzzCanary + "`", "'; touch " + fuzzCanary + "; '", "\"; touch " + fuzzCanary + "; \"",
		"\ntouch " + fuzzCanary + "\n", "a && touch " + fuzzCanary, "x; touch " + fuzzCanary, "*", "?", "[a-z]*",
		"-rf", "--", "-", "-n", "$HOME", "${PATH}", "$1", "$@", "\x01\x02\xff\xfe", "\xc3\x28", "日本語",
		"a\tb\rc", "$((1+1))", "~", "!", "#comment", "| touch " + fuzzCanary, "> " + fuzzCanary, "%s%n",
	}
	for i, s := range seeds {
		f.Add(s, seeds[(i+7)%len(seeds)], seeds[(i+13)%len(seeds)])
	}
	shells := nohuptest.Shells(f)
	envs := make([]*nohup.Env, len(shells))
	root := f.TempDir()
	for i, sh := range shells {
		e, err := nohup.New(&nohuptest.Local{Shell: sh.Path, Env: sh.Env}, nohup.Options{Name: "fuzz-" + sh.Name, BaseDir: root + "/state", Shell: sh.Path})
		require.NoError(f, err)
		f.Cleanup(func() { _ = e.Close() })
		envs[i] = e
	}
	_ = os.Remove(fuzzCanary)

	f.Fuzz(func(t *testing.T, hostileCmd, hostileDir, hostileVal string) {
		if strings.ContainsRune(hostileCmd+hostileDir+hostileVal, 0) {
			return // no argv entry can hold NUL; Spec.Validate rejects it
		}
		name := strings.ReplaceAll(hostileDir, "/", "_")
		if name == "" || name == "." || name == ".." || len(name) > 200 {
			name = "d" + name
		}
		dir := filepath.Join(t.TempDir(), name)
		require.NoError(t, os.Mkdir(dir, 0o755))
		cmd := "cat /proc/$$/cmdline; printf '\\001'; pwd; printf '\\001'; printf '%s' \"$CORRAL_FUZZ\"; exit 0\n" + hostileCmd
		for i, e := range envs {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			p, err := e.Start(ctx, env.Spec{Command: cmd, Dir: dir, Env: []string{"CORRAL_FUZZ=" + hostileVal}})
			if err != nil {
				cancel()
				require.FailNow(t, fmt.Sprintf("%s: Start: %v", shells[i].Name, err))
			}
			out := readAll(t, p, 0)
			st, err := p.Wait(ctx)
			if err != nil || !st.Success() {
				assert.Fail(t, fmt.Sprintf("%s: Wait = %v, %v", shells[i].Name, st, err))
			}
			_ = p.Remove(ctx)
			cancel()
			want := shells[i].Path + "\x00-c\x00" + cmd + "\x00\x01" + dir + "\n\x01" + hostileVal
			if !bytes.Equal(out, []byte(want)) {
				assert.Fail(t, fmt.Sprintf("%s: values changed on the way:\n got %q\nwant %q", shells[i].Name, out, want))
			}
			if _, err := os.Stat(fuzzCanary); err == nil {
				_ = os.Remove(fuzzCanary)
				require.FailNow(t, fmt.Sprintf("%s: canary %s was created: a value was executed", shells[i].Name, fuzzCanary))
			}
		}
	})
}
