//go:build !unix

package nohup

import "os/exec"

// ownGroup: no process groups here; Stop ends the shell alone.
func ownGroup(*exec.Cmd) {}

// hangUp: no hangup signal here; the shell reads end of file.
func hangUp(*exec.Cmd) {}

// killShell ends the shell.
func killShell(cmd *exec.Cmd) { _ = cmd.Process.Kill() }
