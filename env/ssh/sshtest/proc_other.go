//go:build !linux

package sshtest

import "syscall"

// daemonAttr: no process-group or parent-death control here.
func daemonAttr() *syscall.SysProcAttr { return nil }

// killConnections: without /proc the handlers cannot be found; they end
// when their connections close.
func killConnections(pid int) {}
