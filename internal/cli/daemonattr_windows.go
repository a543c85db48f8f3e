package cli

import "syscall"

// noDaemonReason is what the daemon commands say here, in the one line
// they print, before what to use instead (daemonUnavailable). The daemon serves its API on a unix socket: Windows 10
// has AF_UNIX, but Wine 8.0, the only Windows corral is tested on, does
// not (socket() fails with WSAEAFNOSUPPORT), and the daemon's guards are
// Unix ones (the socket's 0600 mode, flock on the state directory, the
// peer's uid). Its processes would not outlive it either: the job objects
// kill them when it exits, so nothing could re-attach them.
const noDaemonReason = "the corral daemon does not run on Windows yet"

// daemonProcAttr: never used while noDaemonReason stands; a new process
// group would at least keep Ctrl-C away.
func daemonProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{CreationFlags: syscall.CREATE_NEW_PROCESS_GROUP}
}
