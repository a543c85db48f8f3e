package engine

import "syscall"

// agentProcAttr puts the ACP agent in a process group of its own, so that
// stopping it reaches what it started, and has the kernel send it SIGTERM
// if corral dies without stopping it (the editor killed corral -9).
func agentProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

// signalAgent signals the agent's process group.
func signalAgent(pid int, sig syscall.Signal) error { return syscall.Kill(-pid, sig) }
