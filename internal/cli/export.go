package cli

import (
	"io"

	"github.com/corralhq/corral/internal/targets"
)

// What corrald's own commands (internal/engine) share with the rest of the
// command line: its exit statuses, its one-line errors, its output.

// ExitCorralError is the exit status of a command corral could not carry out.
const ExitCorralError = exitCorralError

// DefaultBackend is --backend's default.
const DefaultBackend = targets.Default

// Exit ends a command with exit status code and msg (if any) as one line
// on stderr.
func Exit(code int, msg string) error { return &exitError{code: code, msg: msg} }

// UsageErrorf is a usage error (exit status 2).
func UsageErrorf(format string, args ...any) error { return usageErrorf(format, args...) }

// OneLine folds s to one line.
func OneLine(s string) string { return oneLine(s) }

// PrintJSON writes v as indented JSON.
func PrintJSON(w io.Writer, v any) error { return printJSON(w, v) }

// Version is this build's version, as corral version prints it.
func Version() string { return readBuildInfo().Version }

// NoDaemon says why no daemon can run here and what works instead; ""
// where one can.
func NoDaemon() string {
	if noDaemonReason == "" {
		return ""
	}
	return noDaemonReason + ": " + noDaemonInstead
}
