package env_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

func TestSpecValidateRejects(t *testing.T) {
	tag64 := strings.Repeat("a", 64)
	tests := []struct {
		name  string
		spec  env.Spec
		field string
		value string
	}{
		{"empty command", env.Spec{}, "Command", ""},
		{"blank command", env.Spec{Command: " \t\n "}, "Command", ""},
		{"NUL in command", env.Spec{Command: "echo a\x00b"}, "Command", ""},
		{"NUL in dir", env.Spec{Command: "true", Dir: "/tmp\x00/x"}, "Dir", "/tmp\x00/x"},
		{"env without =", env.Spec{Command: "true", Env: []string{"FOO"}}, "Env", "FOO"},
		{"env empty name", env.Spec{Command: "true", Env: []string{"=x"}}, "Env", "=x"},
		{"env name starts with digit", env.Spec{Command: "true", Env: []string{"1FOO=x"}}, "Env", "1FOO=x"},
		{"env name with dash", env.Spec{Command: "true", Env: []string{"FO-O=x"}}, "Env", "FO-O=x"},
		{"env name with space", env.Spec{Command: "true", Env: []string{"FOO BAR=x"}}, "Env", "FOO BAR=x"},
		{"env name with $", env.Spec{Command: "true", Env: []string{"$(id)=x"}}, "Env", "$(id)=x"},
		{"env name with quote", env.Spec{Command: "true", Env: []string{"A'B=x"}}, "Env", "A'B=x"},
		{"env name non-ASCII", env.Spec{Command: "true", Env: []string{"ÄB=x"}}, "Env", "ÄB=x"},
		{"NUL in env value", env.Spec{Command: "true", Env: []string{"FOO=a\x00b"}}, "Env", "FOO=a\x00b"},
		{"NUL in env name", env.Spec{Command: "true", Env: []string{"FO\x00O=x"}}, "Env", "FO\x00O=x"},
		{"second env entry bad", env.Spec{Command: "true", Env: []string{"A=1", "bad"}}, "Env", "bad"},
		{"pty zero rows", env.Spec{Command: "true", PTY: &env.WindowSize{Rows: 0, Cols: 80}}, "PTY", "0x80"},
		{"pty zero cols", env.Spec{Command: "true", PTY: &env.WindowSize{Rows: 24, Cols: 0}}, "PTY", "24x0"},
		{"pty zero size", env.Spec{Command: "true", PTY: &env.WindowSize{}}, "PTY", "0x0"},
		{"tag with space", env.Spec{Command: "true", Tag: "a b"}, "Tag", "a b"},
		{"tag with slash", env.Spec{Command: "true", Tag: "a/b"}, "Tag", "a/b"},
		{"tag with quote", env.Spec{Command: "true", Tag: "a'b"}, "Tag", "a'b"},
		{"tag too long", env.Spec{Command: "true", Tag: tag64 + "a"}, "Tag", tag64 + "a"},
		{"tag non-ASCII", env.Spec{Command: "true", Tag: "é"}, "Tag", "é"},
		{"tag invalid UTF-8", env.Spec{Command: "true", Tag: "\xff"}, "Tag", "\xff"},
		// The first bad field is reported, in declaration order.
		{"command before tag", env.Spec{Tag: "a b"}, "Command", ""},
		{"dir before env", env.Spec{Command: "true", Dir: "\x00", Env: []string{"bad"}}, "Dir", "\x00"},
		{"env before pty", env.Spec{Command: "true", Env: []string{"bad"}, PTY: &env.WindowSize{}}, "Env", "bad"},
		{"pty before tag", env.Spec{Command: "true", PTY: &env.WindowSize{}, Tag: "a b"}, "PTY", "0x0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.spec.Validate()
			require.Error(t, err)
			assert.ErrorIs(t, err, env.ErrInvalidSpec)
			// A validation error is about the spec alone: it must not be
			// mistaken for a missing directory in the sandbox.
			assert.NotErrorIs(t, err, env.ErrDirNotFound)
			var se *env.SpecError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, tt.field, se.Field)
			assert.Equal(t, tt.value, se.Value)
			assert.NotEmpty(t, se.Reason)
			assert.Contains(t, err.Error(), tt.field)
		})
	}
}

func TestSpecValidateAccepts(t *testing.T) {
	tests := []struct {
		name string
		spec env.Spec
	}{
		{"command only", env.Spec{Command: "true"}},
		{"command with quotes, newlines and expansions", env.Spec{Command: "echo \"$HOME\" '`id`'\nexit 3"}},
		{"command with leading space", env.Spec{Command: "  make test"}},
		{"non-ASCII command", env.Spec{Command: "echo héllo ✓"}},
		{"dir with spaces and quotes", env.Spec{Command: "true", Dir: "/tmp/a b/'c'"}},
		{"empty env value", env.Spec{Command: "true", Env: []string{"A="}}},
		{"env value with =", env.Spec{Command: "true", Env: []string{"A=b=c"}}},
		{"env value with shell syntax", env.Spec{Command: "true", Env: []string{"A='$(id)`x`\n\""}}},
		{"env names", env.Spec{Command: "true", Env: []string{"_=1", "_X=1", "a1=2", "Z9_z=3"}}},
		{"duplicate env names", env.Spec{Command: "true", Env: []string{"A=1", "A=2"}}},
		{"smallest pty", env.Spec{Command: "true", PTY: &env.WindowSize{Rows: 1, Cols: 1}}},
		{"largest pty", env.Spec{Command: "true", PTY: &env.WindowSize{Rows: 65535, Cols: 65535}}},
		{"default pty", env.Spec{Command: "true", PTY: &env.DefaultWindowSize}},
		{"stdin and detach", env.Spec{Command: "cat", Stdin: true, Detach: true}},
		{"registry-style tag", env.Spec{Command: "true", Tag: "proc_0123456789ab"}},
		{"tag of every allowed class", env.Spec{Command: "true", Tag: "Az09_.-"}},
		{"64-byte tag", env.Spec{Command: "true", Tag: strings.Repeat("x", 64)}},
		{"everything", env.Spec{Command: "make test", Dir: "/src", Env: []string{"GOFLAGS=-race"},
			PTY: &env.WindowSize{Rows: 40, Cols: 120}, Stdin: true, Detach: true, Tag: "t-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.NoError(t, tt.spec.Validate())
		})
	}
}

func TestValidEnvName(t *testing.T) {
	// Only names that pass are ever put into a shell script unquoted
	// (VAR=value assignments), so anything with shell syntax must fail.
	tests := []struct {
		name string
		want bool
	}{
		{"PATH", true},
		{"_", true},
		{"_1", true},
		{"a", true},
		{"lower_case", true},
		{"X9", true},
		{"", false},
		{"9X", false},
		{"A-B", false},
		{"A.B", false},
		{"A B", false},
		{"A=B", false},
		{"A;B", false},
		{"$A", false},
		{"A`B`", false},
		{"A\nB", false},
		{"Ä", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, env.ValidEnvName(tt.name))
		})
	}
}

func TestSpecError(t *testing.T) {
	tests := []struct {
		name    string
		err     *env.SpecError
		message string
		is      []error
		isNot   []error
	}{
		{
			name:    "with value",
			err:     &env.SpecError{Field: "Tag", Value: "a b", Reason: "bad tag"},
			message: `invalid spec: Tag "a b": bad tag`,
			is:      []error{env.ErrInvalidSpec},
			isNot:   []error{env.ErrDirNotFound, env.ErrNotFound},
		},
		{
			name:    "without value",
			err:     &env.SpecError{Field: "Command", Reason: "empty"},
			message: "invalid spec: Command: empty",
			is:      []error{env.ErrInvalidSpec},
			isNot:   []error{env.ErrDirNotFound},
		},
		{
			name:    "value is quoted",
			err:     &env.SpecError{Field: "Dir", Value: "a\nb\"c", Reason: "x"},
			message: `invalid spec: Dir "a\nb\"c": x`,
			is:      []error{env.ErrInvalidSpec},
		},
		{
			name:    "more specific sentinel",
			err:     &env.SpecError{Field: "Dir", Value: "/nope", Reason: "no such directory", Err: env.ErrDirNotFound},
			message: `invalid spec: Dir "/nope": no such directory`,
			is:      []error{env.ErrInvalidSpec, env.ErrDirNotFound},
			isNot:   []error{env.ErrNotFound, env.ErrUnsupported},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.message, tt.err.Error())
			// Wrapped the way backends wrap it.
			wrapped := fmt.Errorf("local: start %q: %w", "true", tt.err)
			for _, target := range tt.is {
				assert.ErrorIs(t, tt.err, target)
				assert.ErrorIs(t, wrapped, target)
			}
			for _, target := range tt.isNot {
				assert.NotErrorIs(t, tt.err, target)
			}
		})
	}
}
