//go:build unix

package daemon

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockStateDir takes the daemon's exclusive lock (flock, released by the
// kernel when the process dies, so a crashed daemon never blocks the next).
func lockStateDir(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("daemon: open lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (it holds %s)", ErrAlreadyRunning, path)
		}
		return nil, fmt.Errorf("daemon: lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
