//go:build unix && !linux

package engine

import "syscall"

// agentProcAttr puts the ACP agent in a process group of its own, so that
// stopping it reaches what it started.
func agentProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// signalAgent signals the agent's process group.
func signalAgent(pid int, sig syscall.Signal) error { return syscall.Kill(-pid, sig) }
