//go:build !windows

package cli

import (
	"io"
	"os"
	"syscall"
)

// execEngine replaces this process with corrald: its stdin, stdout,
// stderr, signals and exit status are then corrald's. It returns only
// when the exec failed.
func execEngine(path string, args []string, _, _ io.Writer) (int, error) {
	return 0, syscall.Exec(path, append([]string{path}, args...), os.Environ())
}
