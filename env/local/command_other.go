//go:build !linux

package local

import "os"

// memCommand is Linux only: elsewhere a command of any length is the
// shell's -c argument, within the system's own argument limits (see
// env.InlineCommandMax).
func memCommand(string) (*os.File, error) { return nil, nil }

const memCommandArg = ""
