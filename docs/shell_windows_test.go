package docs_test

import (
	"fmt"
	"os"
	"os/exec"

	"github.com/corralhq/corral/internal/testing/winsh"
)

// Started as sh.exe (by the example's registry), this binary runs the -c
// line and exits before any test starts.
func init() { winsh.MainIfShell() }

// provideShell keeps a real sh (Git for Windows, MSYS2) when PATH has one,
// so the example is checked against it; otherwise (Wine, a bare Windows)
// it installs this binary as sh.exe in a temporary directory.
func provideShell() (cleanup func(), err error) {
	if _, err := exec.LookPath("sh"); err == nil {
		return func() {}, nil
	}
	dir, err := os.MkdirTemp("", "corral-docs-sh-")
	if err != nil {
		return nil, fmt.Errorf("docs test: create a directory for sh.exe: %w", err)
	}
	if _, err := winsh.Install(dir); err != nil {
		_ = winsh.RemoveTree(dir)
		return nil, err
	}
	return func() {
		if err := winsh.RemoveTree(dir); err != nil {
			fmt.Fprintln(os.Stderr, "docs test: remove the stand-in sh.exe:", err)
		}
	}, nil
}
