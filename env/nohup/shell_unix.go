//go:build unix

package nohup

import (
	"os/exec"
	"syscall"
)

// ownGroup puts the shell StartShell starts in a process group of its own
// (unless cmd asks for a session or group already), so that Stop reaches
// the subshell of a call in flight too. What a call starts for good (a
// wrapped process, an armed spare) runs in a session of its own and is
// not touched.
func ownGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if !cmd.SysProcAttr.Setsid && !cmd.SysProcAttr.Setpgid {
		cmd.SysProcAttr.Setpgid = true
	}
}

// signalGroup sends sig to the shell's group, or to the shell alone when it
// does not lead one.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) {
	pid := cmd.Process.Pid
	if pgid, err := syscall.Getpgid(pid); err == nil && pgid == pid {
		_ = syscall.Kill(-pid, sig)
		return
	}
	_ = syscall.Kill(pid, sig)
}

// hangUp tells the shell and a call in flight that their caller is gone,
// as a terminal's hangup would: the call's subshell ends, and the shell
// removes the spares it armed (its HUP trap) and exits.
func hangUp(cmd *exec.Cmd) { signalGroup(cmd, syscall.SIGHUP) }

// killShell ends the shell and what is left of its group.
func killShell(cmd *exec.Cmd) { signalGroup(cmd, syscall.SIGKILL) }
