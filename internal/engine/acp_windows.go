package engine

import (
	"os"
	"syscall"
)

func agentProcAttr() *syscall.SysProcAttr { return nil }

// signalAgent can only kill on Windows: there are no signals to send.
func signalAgent(pid int, _ syscall.Signal) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}
