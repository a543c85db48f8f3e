package env

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Spec describes a process to start.
//
// The zero value is not valid: Command is required. Everything else has a
// working default: the sandbox's default directory, the backend's base
// environment, pipes, no stdin.
type Spec struct {
	// Command is a shell command line, run as /bin/sh -c Command inside the
	// sandbox. It is passed to the shell as one argument, never spliced into
	// another script unquoted. It may be of any length: one longer than
	// InlineCommandMax is written to a file in the process's private
	// directory (or a memory file) and run as /bin/sh -c '. FILE' (see
	// InlineCommandMax).
	Command string `json:"command"`

	// Dir is the working directory. Empty means the backend's default (the
	// supervisor's working directory for local, the container's WORKDIR, the
	// remote user's home). A Dir that does not exist is an error matching
	// ErrDirNotFound; nothing is started.
	Dir string `json:"dir,omitempty"`

	// Env holds extra variables as KEY=VALUE, applied on top of the
	// backend's base environment. Later entries win.
	Env []string `json:"env,omitempty"`

	// Environ, when non-nil, is the caller's whole environment
	// (KEY=VALUE). A backend whose base environment is its supervisor's own
	// (local) starts from Environ instead, so that a supervisor serving
	// many callers (the daemon) passes on the caller's environment and
	// none of its own; Env still applies on top. Backends whose base is
	// the sandbox's (docker, ssh, plugins) ignore it: the environment of
	// the caller's machine means nothing there. It is taken as given:
	// filtering credentials out is the caller's part.
	Environ []string `json:"environ,omitempty"`

	// PTY, when non-nil, runs the command on a pseudo-terminal of that size;
	// stdout and stderr are then the terminal's output. Nil means pipes.
	PTY *WindowSize `json:"pty,omitempty"`

	// Stdin opens the process's stdin for Process.Write. When false the
	// process reads EOF (/dev/null) from stdin.
	Stdin bool `json:"stdin,omitempty"`

	// Detach asks for a process that survives the supervisor: its output
	// and exit status are kept inside the sandbox, and Process.Ref returns
	// a Ref to re-attach to it. Backends whose Capabilities.Reattach is
	// false reject it with ErrUnsupported. Sandbox backends (docker, ssh)
	// detach every process whether asked or not.
	Detach bool `json:"detach,omitempty"`

	// Tag is an optional caller-chosen identifier (the registry uses its
	// process ID), recorded with the process for diagnostics. It must match
	// [A-Za-z0-9_.-]{0,64}.
	Tag string `json:"tag,omitempty"`

	// Limits, when non-nil, are hard ceilings on the process's tree (see
	// Limits). A backend refuses those its Capabilities.Limits does not
	// name (a *LimitError); nil or zero means none.
	Limits *Limits `json:"limits,omitempty"`
}

// InlineCommandMax is the longest Command a backend passes to the shell as
// its -c argument. Linux refuses a single argument over 128 KiB (E2BIG)
// and all of argv and the environment over about 2 MiB, so a longer
// command (a file written with a heredoc, say) travels outside argv: the
// backend writes it to a file only the process's user can read (env/nohup
// and env/local's detached processes: "command" in the process's
// directory; env/local's other processes: a memory file on descriptor 3,
// closed by the first line of the file) and runs /bin/sh -c '. FILE'. The
// command then sees what `sh -c COMMAND` gives it: the same $0, no
// positional parameters, the same stdin (the shell reads the file, never
// stdin), the same exit status; `return` at its top level ends it as exit
// would. ps shows the shell sourcing the file instead of the command.
const InlineCommandMax = 64 << 10

// WindowSize is a terminal size in character cells.
type WindowSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// DefaultWindowSize is the size used when a caller asks for a PTY without
// choosing one.
var DefaultWindowSize = WindowSize{Rows: 24, Cols: 80}

// Validate checks the parts of a Spec that do not depend on the sandbox. It
// returns a *SpecError (matching ErrInvalidSpec) naming the first bad field.
// Backends call it first in Start; the working directory's existence is
// checked by the backend.
func (s Spec) Validate() error {
	if strings.TrimSpace(s.Command) == "" {
		return &SpecError{Field: "Command", Reason: "empty command line; give a shell command such as \"make test\""}
	}
	if strings.IndexByte(s.Command, 0) >= 0 {
		return &SpecError{Field: "Command", Reason: "contains a NUL byte, which no shell argument can carry"}
	}
	if strings.IndexByte(s.Dir, 0) >= 0 {
		return &SpecError{Field: "Dir", Value: s.Dir, Reason: "contains a NUL byte"}
	}
	for _, kv := range s.Env {
		if err := validateEnvEntry("Env", kv); err != nil {
			return err
		}
	}
	for _, kv := range s.Environ {
		if err := validateEnvEntry("Environ", kv); err != nil {
			return err
		}
	}
	if s.PTY != nil && (s.PTY.Rows == 0 || s.PTY.Cols == 0) {
		return &SpecError{Field: "PTY", Value: fmt.Sprintf("%dx%d", s.PTY.Rows, s.PTY.Cols), Reason: "rows and columns must both be at least 1"}
	}
	if s.Limits != nil {
		if err := s.Limits.Validate(); err != nil {
			return err
		}
	}
	if !ValidTag(s.Tag) {
		return &SpecError{Field: "Tag", Value: s.Tag, Reason: "must match [A-Za-z0-9_.-]{0,64}"}
	}
	return nil
}

func validateEnvEntry(field, kv string) error {
	name, _, ok := strings.Cut(kv, "=")
	if !ok {
		return &SpecError{Field: field, Value: kv, Reason: "must be KEY=VALUE"}
	}
	if !ValidEnvName(name) {
		return &SpecError{Field: field, Value: kv, Reason: "variable name must match [A-Za-z_][A-Za-z0-9_]*"}
	}
	if strings.IndexByte(kv, 0) >= 0 {
		return &SpecError{Field: field, Value: kv, Reason: "contains a NUL byte"}
	}
	return nil
}

// ValidEnvName reports whether name is a portable environment variable name,
// [A-Za-z_][A-Za-z0-9_]*. Only such names are ever put into a shell script.
func ValidEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// ValidTag reports whether tag matches [A-Za-z0-9_.-]{0,64}.
func ValidTag(tag string) bool {
	if len(tag) > 64 || !utf8.ValidString(tag) {
		return false
	}
	for i := 0; i < len(tag); i++ {
		c := tag[i]
		switch {
		case c == '_', c == '.', c == '-', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		default:
			return false
		}
	}
	return true
}
