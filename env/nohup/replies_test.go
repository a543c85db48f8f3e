package nohup

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

// TestReplyWordsDeclared fails on a refusal word a script prints that Go
// does not declare (it would reach the caller as an unknown reply), and on
// a declared word no script prints any more.
func TestReplyWordsDeclared(t *testing.T) {
	declared := map[string]bool{wordNone: true}
	for w := range launchRefusals {
		declared[w] = true
	}
	for w := range wrapperRefusals {
		declared[w] = true
	}
	// A refusal is a word starting with "no", echoed alone or first.
	word := regexp.MustCompile(`\becho "?(no[a-z]+)\b`)
	files, err := filepath.Glob("sh/*.sh")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	printed := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range word.FindAllStringSubmatch(string(b), -1) {
			printed[m[1]] = true
			require.Truef(t, declared[m[1]], "%s prints %q, which replies.go does not declare", f, m[1])
		}
	}
	for w := range declared {
		require.Truef(t, printed[w], "replies.go declares %q, which no script prints", w)
	}
}

// TestLaunchRefusalErrors checks that every refusal becomes its own error,
// never the catch-all for an unknown reply, with the sentinel callers
// branch on.
func TestLaunchRefusalErrors(t *testing.T) {
	e := &Env{opts: Options{Name: "t", BaseDir: "/base", Shell: "/bin/sh"}}
	spec := env.Spec{Command: "true", Dir: "/nowhere"}
	sentinels := map[string]error{"nodir": env.ErrDirNotFound, "nosetsid": env.ErrUnsupported, "noshell": env.ErrUnsupported, "nolimits": env.ErrUnsupported}
	for w := range launchRefusals {
		r, detail, ok := launchRefused(w + " nocommand")
		require.True(t, ok, w)
		err := r.err(e, spec, detail)
		require.Error(t, err, w)
		require.NotContains(t, err.Error(), "wrapper failed", w)
		if s, ok := sentinels[w]; ok {
			require.ErrorIs(t, err, s, w)
		} else {
			require.Falsef(t, errors.Is(err, env.ErrUnsupported) || errors.Is(err, env.ErrInvalidSpec), "%s: %v", w, err)
		}
	}
	r, detail, ok := launchRefused("nostart nocommand")
	require.True(t, ok)
	require.Contains(t, r.err(e, spec, detail).Error(), wrapperRefusals["nocommand"])
	r, detail, ok = launchRefused("nostart sh: 1: cannot fork")
	require.True(t, ok)
	require.Contains(t, r.err(e, spec, detail).Error(), `"sh: 1: cannot fork"`)
	_, _, ok = launchRefused("ok 1 2 3 4")
	require.False(t, ok)
}
