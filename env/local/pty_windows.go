package local

import (
	"errors"
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

// shellHint adds what to do to a start that found no sh: Windows has none
// of its own, and "executable file not found in %PATH%" does not say
// that corral needs one.
func shellHint(err error) error {
	if errors.Is(err, exec.ErrNotFound) {
		return fmt.Errorf("%w: corral runs every command under sh -c; install Git for Windows (or MSYS2) and put its sh on PATH", err)
	}
	return err
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
