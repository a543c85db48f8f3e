//go:build !unix

package main

import (
	"io"

	"github.com/corralhq/corral/env"
)

// terminalSize is not implemented off unix; --pty uses the default size.
func terminalSize(w io.Writer) (env.WindowSize, bool) { return env.WindowSize{}, false }
