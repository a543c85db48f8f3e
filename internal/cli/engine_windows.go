package cli

import (
	"errors"
	"io"
	"os"
	"os/exec"
)

// execEngine runs corrald as a child on Windows, which cannot replace a
// process: the console's Ctrl-C reaches both, and corral exits with
// corrald's status.
func execEngine(path string, args []string, stdout, stderr io.Writer) (int, error) {
	cmd := exec.Command(path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	return 0, err
}
