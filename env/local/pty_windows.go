package local

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/corralhq/corral/env"
)

func openPTY(env.WindowSize) (master, slave *os.File, err error) {
	return nil, nil, fmt.Errorf("no PTY on windows: %w", env.ErrUnsupported)
}

func setPTYAttrs(*exec.Cmd) {}

func resizePTY(*os.File, env.WindowSize) error {
	return fmt.Errorf("no PTY on windows: %w", env.ErrUnsupported)
}

// shellPath finds a POSIX sh (Git for Windows, MSYS2); the contract runs
// every command under sh -c.
func shellPath() string {
	if p, err := exec.LookPath("sh"); err == nil {
		return p
	}
	return "sh"
}

func sysSignal(sig env.Signal) (syscall.Signal, error) {
	if !sig.Valid() {
		return 0, fmt.Errorf("unknown signal %q", string(sig))
	}
	return syscall.Signal(sig.Number()), nil
}

func exitStatusOf(ps *os.ProcessState) env.ExitStatus { return env.Exited(ps.ExitCode()) }
