//go:build unix

package cli

import "syscall"

// daemonProcAttr detaches an auto-started daemon from the caller's session,
// so a terminal hangup or Ctrl-C in the caller's shell does not reach it.
func daemonProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

// noDaemonReason is empty: the daemon runs on Unix systems.
const noDaemonReason = ""
