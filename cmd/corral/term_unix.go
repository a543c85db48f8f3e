//go:build unix

package main

import (
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/env"
)

// terminalSize returns the window size of w when it is a terminal, so a
// --pty command formats its output for the terminal it is shown on.
func terminalSize(w io.Writer) (env.WindowSize, bool) {
	f, ok := w.(*os.File)
	if !ok {
		return env.WindowSize{}, false
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Row == 0 || ws.Col == 0 {
		return env.WindowSize{}, false
	}
	return env.WindowSize{Rows: ws.Row, Cols: ws.Col}, true
}
