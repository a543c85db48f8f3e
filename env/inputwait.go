package env

import "context"

// The kinds of InputWait: how the process reads what it waits for.
const (
	// InputLine: a terminal in canonical mode (a line is read on Enter).
	InputLine = "line"
	// InputRaw: a terminal with ICANON off (a full-screen or
	// key-at-a-time program: less, vi, a readline prompt).
	InputRaw = "raw"
	// InputPassword: a terminal in canonical mode with ECHO off.
	InputPassword = "password"
	// InputPipe: a read on the stdin pipe corral holds (Spec.Stdin).
	InputPipe = "pipe"
)

// InputWait says that a process's foreground job is blocked reading its
// terminal or its stdin pipe right now.
type InputWait struct {
	Kind string `json:"kind"`
}

// InputWatcher is implemented by an Environment that can tell, for many
// of its processes in one look (one pass over /proc on the machine, one
// round trip into a sandbox), which of them wait for input. InputWaits
// returns, for each of procs in order, its InputWait, or nil when it does
// not wait, is not this Environment's, or is gone. An error means no
// result for any of them. How long the process has been quiet, and what
// it asked, are the caller's to judge.
type InputWatcher interface {
	InputWaits(ctx context.Context, procs []Process) ([]*InputWait, error)
}
