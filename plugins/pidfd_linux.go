package plugins

import "golang.org/x/sys/unix"

// openPidfd pins the plugin process, or returns -1 (old kernel, no pid).
func openPidfd(pid int) int {
	if pid <= 0 {
		return -1
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1
	}
	return fd
}

// pidfdExited is a zero-timeout poll of the pidfd: readable once the
// process has ended, zombies included.
func pidfdExited(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}

func closePidfd(fd int) { _ = unix.Close(fd) }
