package main

import "syscall"

// daemonProcAttr: the daemon listens on a unix socket, which Windows builds
// do not serve yet; a new process group at least keeps Ctrl-C away.
func daemonProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{CreationFlags: syscall.CREATE_NEW_PROCESS_GROUP}
}
