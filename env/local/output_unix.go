//go:build linux || darwin

package local

import (
	"errors"
	"os"
	"syscall"
)

// readNow reads what f (a non-blocking descriptor) holds right now,
// ignoring its deadline; n is 0 when nothing is buffered.
func readNow(f *os.File, b []byte) (n int, err error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	cerr := rc.Control(func(fd uintptr) {
		for {
			n, err = syscall.Read(int(fd), b)
			if err != syscall.EINTR {
				return
			}
		}
	})
	if cerr != nil {
		return 0, cerr
	}
	if errors.Is(err, syscall.EAGAIN) {
		return 0, nil
	}
	if n < 0 {
		n = 0
	}
	return n, err
}
