//go:build !linux && !darwin

package cli

import (
	"io"
	"os"

	"github.com/corralhq/corral/env"
)

// terminalSize is not implemented here; --pty uses the default size.
func terminalSize(w io.Writer) (env.WindowSize, bool) { return env.WindowSize{}, false }

// isTerminal is not implemented here: no terminal is assumed, so a
// command that waits for input is named.
func isTerminal(r io.Reader) bool { return false }

// makeRaw is not implemented here: stdin is forwarded as the terminal
// delivers it.
func makeRaw(r io.Reader) (restore func(), ok bool) { return nil, false }

// notifyResize: this system does not announce size changes.
func notifyResize(c chan<- os.Signal) {}

// makeCbreak is not implemented here: corral top reads no keys.
func makeCbreak(r io.Reader) (restore func(), ok bool) { return nil, false }
