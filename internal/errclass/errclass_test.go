package errclass_test

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/errclass"
	"github.com/corralhq/corral/registry"
)

// sentinels is every sentinel of env and registry with the class it must
// declare. TestEverySentinelIsListed keeps it complete.
var sentinels = map[string]struct {
	err   error
	class errclass.Class
}{
	"env.ErrNotFound":            {env.ErrNotFound, errclass.ProcessGone},
	"env.ErrUnsupported":         {env.ErrUnsupported, errclass.Unsupported},
	"env.ErrSandboxGone":         {env.ErrSandboxGone, errclass.SandboxGone},
	"env.ErrReleased":            {env.ErrReleased, errclass.Released},
	"env.ErrExited":              {env.ErrExited, errclass.Exited},
	"env.ErrInvalidSpec":         {env.ErrInvalidSpec, errclass.InvalidSpec},
	"env.ErrDirNotFound":         {env.ErrDirNotFound, errclass.InvalidSpec},
	"env.ErrStdinClosed":         {env.ErrStdinClosed, errclass.StdinClosed},
	"env.ErrUnavailable":         {env.ErrUnavailable, errclass.Unavailable},
	"registry.ErrInvalidID":      {registry.ErrInvalidID, errclass.InvalidID},
	"registry.ErrNotFound":       {registry.ErrNotFound, errclass.NotFound},
	"registry.ErrAmbiguous":      {registry.ErrAmbiguous, errclass.Ambiguous},
	"registry.ErrLimit":          {registry.ErrLimit, errclass.Limit},
	"registry.ErrWaitTimeout":    {registry.ErrWaitTimeout, errclass.WaitTimeout},
	"registry.ErrUnreachable":    {registry.ErrUnreachable, errclass.Unavailable},
	"registry.ErrRunning":        {registry.ErrRunning, errclass.Running},
	"registry.ErrNotRunning":     {registry.ErrNotRunning, errclass.NotRunning},
	"registry.ErrInvalidOptions": {registry.ErrInvalidOptions, errclass.Invalid},
	"registry.ErrClosed":         {registry.ErrClosed, errclass.Closed},
	"registry.ErrNameInUse":      {registry.ErrNameInUse, errclass.NameInUse},
}

// TestEverySentinelIsListed reads the Err* variables declared in
// env/errors.go and registry/errors.go: a sentinel added there must be
// added to sentinels, with its class.
func TestEverySentinelIsListed(t *testing.T) {
	var declared []string
	for pkg, file := range map[string]string{"env": "../../env/errors.go", "registry": "../../registry/errors.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), filepath.FromSlash(file), nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				for _, name := range spec.(*ast.ValueSpec).Names {
					if strings.HasPrefix(name.Name, "Err") {
						declared = append(declared, pkg+"."+name.Name)
					}
				}
			}
		}
	}
	slices.Sort(declared)
	var listed []string
	for name := range sentinels {
		listed = append(listed, name)
	}
	slices.Sort(listed)
	assert.Truef(t, slices.Equal(declared, listed), "sentinels declared %v, listed here %v", declared, listed)
}

// TestSentinelClasses: each sentinel is of its class and of no other, and
// stays a distinct value with its message.
func TestSentinelClasses(t *testing.T) {
	for name, s := range sentinels {
		if got := errclass.Of(s.err); got != s.class {
			assert.Fail(t, fmt.Sprintf("%s: class %v, want %v", name, got, s.class))
		}
		wrapped := fmt.Errorf("op: %w", s.err)
		got := errclass.Of(wrapped)
		assert.Truef(t, got == s.class, "wrapped %s: class %v, want %v", name, got, s.class)
		assert.Truef(t, errclass.Match(s.err, s.class), "%s does not Match its class %v", name, s.class)
		for _, c := range errclass.Classes() {
			assert.Truef(t, c == s.class || !errclass.Is(wrapped, c) && !errclass.Match(s.err, c), "%s is also of class %v", name, c)
		}
		for other, o := range sentinels {
			assert.Truef(t, other == name || !errors.Is(s.err, o.err), "%s matches %s", name, other)
		}
		assert.Truef(t, strings.HasPrefix(s.err.Error(), strings.SplitN(name, ".", 2)[0]+": "), "%s: message %q lacks its package prefix", name, s.err)
	}
}

// TestClassOfCompositeErrors: the types that match a sentinel through an
// Is method are of its class, and an error of several classes is of the
// first in precedence, whatever the order of wrapping.
func TestClassOfCompositeErrors(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want errclass.Class
	}{
		{"SpecError", &env.SpecError{Field: "Dir", Reason: "no"}, errclass.InvalidSpec},
		{"SpecError with ErrDirNotFound", fmt.Errorf("start: %w", &env.SpecError{Field: "Dir", Reason: "no", Err: env.ErrDirNotFound}), errclass.InvalidSpec},
		{"AmbiguousError", fmt.Errorf("x: %w", &registry.AmbiguousError{Prefix: "abcd"}), errclass.Ambiguous},
		{"not running, as env said exited", fmt.Errorf("write: %w: %w", registry.ErrNotRunning, env.ErrExited), errclass.NotRunning},
		{"the same, wrapped the other way", fmt.Errorf("write: %w: %w", env.ErrExited, registry.ErrNotRunning), errclass.NotRunning},
		{"joined", errors.Join(registry.ErrClosed, registry.ErrNotFound), errclass.NotFound},
		{"plain", errors.New("registry: not found"), errclass.Unknown},
		{"nil", nil, errclass.Unknown},
	}
	for _, tc := range cases {
		got := errclass.Of(tc.err)
		assert.Truef(t, got == tc.want, "%s: class %v, want %v", tc.name, got, tc.want)
	}
	// Is still tells the sentinels of one class apart.
	assert.False(t, errors.Is(&env.SpecError{Field: "Dir", Reason: "no"}, env.ErrDirNotFound), "a SpecError without Err matches ErrDirNotFound")
}

func TestClassNames(t *testing.T) {
	seen := map[string]bool{errclass.Unknown.String(): true}
	for _, c := range errclass.Classes() {
		n := c.String()
		assert.Falsef(t, n == "" || strings.HasPrefix(n, "class(") || seen[n], "class %d: name %q missing or repeated", c, n)
		seen[n] = true
		assert.Truef(t, !errclass.Match(errors.New(n), c) && !errclass.Is(errors.New(n), c), "a plain error matches class %v", c)
	}
	assert.False(t, errclass.Is(errclass.New(errclass.Unknown, "x"), errclass.Unknown), "Is(_, Unknown) holds")
}
