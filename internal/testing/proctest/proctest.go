//go:build unix

// Package proctest finds a test's own processes in the local process table:
// a test runs `sleep MARKER`, with a MARKER unique to it, inside the tree it
// means to kill, and then asks whether any such process is left. It reads
// /proc, so it serves Linux tests (and processes of local Docker
// containers, which share the kernel's table).
package proctest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Marker returns a sleep duration unique to this test run, such as
// "7431.0087": long enough to outlast any test, and recognisable.
func Marker() string {
	return fmt.Sprintf("%d.%04d", 7000+rand.IntN(999), rand.IntN(10000))
}

// Sleepers returns the PIDs of live `sleep MARKER` processes (whatever the
// path of sleep).
func Sleepers(marker string) []int {
	want := "\x00" + marker + "\x00"
	return scan(func(cmdline string) bool {
		argv0, rest, ok := strings.Cut(cmdline, "\x00")
		return ok && filepath.Base(argv0) == "sleep" && "\x00"+rest == want
	})
}

// PIDsWith returns the PIDs of live processes whose command line (its
// arguments joined by spaces) contains s.
func PIDsWith(s string) []int {
	return scan(func(cmdline string) bool { return strings.Contains(strings.ReplaceAll(cmdline, "\x00", " "), s) })
}

// PIDsWithWord returns the PIDs of live processes whose command line has
// word as a whole word, splitting at NULs and at the blanks and semicolons
// of a shell command: a marker anywhere in a command (`: MARKER`, `sleep
// MARKER`), whichever shell or sandbox runs it on this machine.
func PIDsWithWord(word string) []int {
	return scan(func(cmdline string) bool {
		words := strings.FieldsFunc(cmdline, func(r rune) bool {
			return r == 0 || r == ' ' || r == ';' || r == '\n' || r == '\t'
		})
		return slices.Contains(words, word)
	})
}

// KillWith SIGKILLs every live process whose command line has one of
// markers as a word (see PIDsWithWord): the leftovers of a failed test,
// and only its own.
func KillWith(markers ...string) {
	for _, m := range markers {
		for _, pid := range PIDsWithWord(m) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// scan returns the PIDs whose raw command line (NUL-separated) matches.
// Zombies have an empty command line, so a match is alive.
func scan(match func(cmdline string) bool) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // exited meanwhile
		}
		if len(b) > 0 && match(string(b)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// KillOnCleanup SIGKILLs every `sleep MARKER` left when the test ends, so a
// failed assertion leaves nothing behind.
func KillOnCleanup(t testing.TB, marker string) {
	t.Cleanup(func() {
		for _, pid := range Sleepers(marker) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// WaitRunning waits until at least n `sleep MARKER` processes run, so a
// kill test proves the tree existed before it was killed.
func WaitRunning(t testing.TB, marker string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(Sleepers(marker)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("expected %d `sleep %s` processes, found %v", n, marker, Sleepers(marker))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// RequireGone fails unless no `sleep MARKER` process is left. A killed
// process can take a moment to leave the table, so it waits for that with
// a generous deadline rather than asserting once.
func RequireGone(t testing.TB, marker string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := Sleepers(marker)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of the tree survived: `sleep %s` still running as PIDs %v", marker, pids)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
