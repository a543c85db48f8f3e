package env

import "context"

// The kinds of InputWait: how the process waits, which says how an
// answer should be given.
const (
	// InputLine: a read on a terminal in canonical mode (a shell's
	// `read`, Python's input()): the answer is a line ending in a newline.
	InputLine = "line"
	// InputRaw: a read on a terminal with ICANON off (a full-screen
	// program, a key-at-a-time prompt): keys, not lines.
	InputRaw = "raw"
	// InputPassword: a read on a terminal in canonical mode with ECHO off
	// (getpass, ssh-keygen's passphrase): a line that is not shown.
	InputPassword = "password"
	// InputPipe: a read on the stdin pipe the Spec asked for (Spec.Stdin
	// without a PTY).
	InputPipe = "pipe"
)

// InputWait says that a process's foreground job is blocked reading its
// terminal or its stdin right now. It is a fact about one moment: how long
// the process has been quiet, and what it asked, are the caller's to
// judge from the output.
type InputWait struct {
	// Kind is InputLine, InputRaw, InputPassword or InputPipe.
	Kind string `json:"kind"`
}

// InputWatcher is implemented by an Environment that can tell, for many
// of its processes in one look, which of them wait for input: one pass
// over /proc on the machine, one round trip into a sandbox.
//
// InputWaits returns, for each of procs in order, how that process waits,
// or nil when it does not: it runs, sleeps, waits for a child, a lock or a
// socket, reads something other than its terminal or stdin pipe, or it is
// in a background group of its terminal. A process that is not one of
// this Environment's (another backend's handle, one released) or whose
// tree is gone gets nil and no error. An error means no result for any of
// them.
type InputWatcher interface {
	InputWaits(ctx context.Context, procs []Process) ([]*InputWait, error)
}
