//go:build linux || darwin

package local

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"github.com/corralhq/corral/env"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// openPTY opens a terminal pair of the given size. The master is returned
// in non-blocking mode, registered with Go's poller, so reads honour
// deadlines (pty.Open leaves it blocking because it calls Fd).
func openPTY(size env.WindowSize) (master, slave *os.File, err error) {
	m, s, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	defer m.Close()
	// F_DUPFD_CLOEXEC: a concurrent fork must never inherit the master.
	dup, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		_ = s.Close()
		return nil, nil, fmt.Errorf("dup pty master: %w", err)
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		_ = unix.Close(dup)
		_ = s.Close()
		return nil, nil, fmt.Errorf("pty master non-blocking: %w", err)
	}
	master = os.NewFile(uintptr(dup), "/dev/ptmx")
	if err := resizePTY(master, size); err != nil {
		_ = master.Close()
		_ = s.Close()
		return nil, nil, err
	}
	return master, s, nil
}

// setPTYAttrs makes the slave (the command's stdin, fd 0) the controlling
// terminal of a new session. No Setpgid: a session leader already leads
// its group, and asking for both fails with EPERM.
func setPTYAttrs(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
	cmd.SysProcAttr.Setpgid = false
	cmd.SysProcAttr.Setctty = true
	cmd.SysProcAttr.Ctty = 0
}

func resizePTY(master *os.File, size env.WindowSize) error {
	rc, err := master.SyscallConn()
	if err != nil {
		return err
	}
	var ioctlErr error
	err = rc.Control(func(fd uintptr) {
		ioctlErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Rows, Col: size.Cols})
	})
	if err != nil {
		return err
	}
	if ioctlErr != nil {
		return fmt.Errorf("set window size: %w", ioctlErr)
	}
	return nil
}

func shellPath() string { return "/bin/sh" }

// shellHint: every Unix has /bin/sh, so a failed start says enough.
func shellHint(err error) error { return err }

// sysSignal maps a portable signal name to this system's number.
func sysSignal(sig env.Signal) (syscall.Signal, error) {
	if !sig.Valid() {
		return 0, fmt.Errorf("unknown signal %q", string(sig))
	}
	n := unix.SignalNum("SIG" + string(sig))
	if n == 0 {
		return 0, fmt.Errorf("signal %s does not exist on this system: %w", sig, env.ErrUnsupported)
	}
	return n, nil
}

// exitStatusOf reads the raw wait status, so an exit code of 143 is never
// mistaken for SIGTERM.
func exitStatusOf(ps *os.ProcessState) env.ExitStatus {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok {
		return env.Exited(ps.ExitCode())
	}
	return statusFromWait(ws)
}

func statusFromWait(ws syscall.WaitStatus) env.ExitStatus {
	if ws.Signaled() {
		if runtime.GOOS == "linux" {
			if name := env.SignalFromNumber(int(ws.Signal())); name != "" {
				return env.Signaled(name)
			}
		}
		name := unix.SignalName(ws.Signal())
		if len(name) > 3 {
			return env.Signaled(env.Signal(name[3:]))
		}
		return env.Signaled(env.Signal(fmt.Sprint(int(ws.Signal()))))
	}
	return env.Exited(ws.ExitStatus())
}
