// Package winsh is a stand-in for the POSIX sh.exe that corral's local
// backend runs commands under on Windows (Git for Windows' in real use).
// Under Wine there is no such sh, and a Linux /bin/sh cannot stand in (the
// parent gets no process handle for it), so a Windows test binary copies
// itself to sh.exe, puts that first in PATH, and calls MainIfShell first
// thing: started as sh.exe, it interprets the -c line and exits.
//
// The language is a few built-ins, enough for exit codes, output, stdin
// and trees: statements split on ";" or newlines, words on blanks, with
// '...' and "..." quoting (no expansion at all):
//
//	echo WORDS...    print the words and a newline
//	exit [N]         end with status N (default: the last status)
//	sleep SECONDS    sleep (fractions allowed)
//	pid DIR          create DIR\<own pid>: members report their PIDs
//	spawn LINE       start `sh -c LINE` (this binary again) and do not wait:
//	                 it inherits stdin, stdout and stderr
//	cat              copy stdin to stdout
//
// Anything else prints "sh: NAME: not found" and sets status 127, as sh
// does. The package builds everywhere so the interpreter is tested on
// Linux too; only tests import it.
package winsh

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// MainIfShell runs the -c line and exits when this process was started as
// sh (argv[0]'s base name is sh or sh.exe); otherwise it returns at once.
// The name, not an environment variable, is the sign, because corral
// filters and replaces the environment of the commands it starts.
func MainIfShell() {
	if !startedAsShell(os.Args) {
		return
	}
	if len(os.Args) != 3 || os.Args[1] != "-c" {
		fmt.Fprintf(os.Stderr, "sh (winsh): usage: sh -c LINE, got %q\n", os.Args[1:])
		os.Exit(2)
	}
	os.Exit(Run(os.Args[2], os.Stdin, os.Stdout, os.Stderr))
}

func startedAsShell(args []string) bool {
	if len(args) == 0 {
		return false
	}
	// filepath.Base splits on "/" only outside Windows; a Windows argv[0]
	// uses "\", so both are cut here.
	base := args[0][strings.LastIndexAny(args[0], `/\`)+1:]
	base = strings.ToLower(base)
	return base == "sh" || base == "sh.exe"
}

// Install copies the running executable into dir as sh.exe and puts dir
// first in PATH (os.Setenv: TestMain calls it, before any test runs, and
// Example functions have no *testing.T). It returns the copy's path.
func Install(dir string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("winsh: find the test binary: %w", err)
	}
	sh := filepath.Join(dir, "sh.exe")
	if err := copyFile(self, sh); err != nil {
		return "", fmt.Errorf("winsh: copy the test binary to %s: %w", sh, err)
	}
	if err := os.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH")); err != nil {
		return "", fmt.Errorf("winsh: set PATH: %w", err)
	}
	return sh, nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// ReportedPIDs returns the PIDs that `pid DIR` statements recorded in dir.
func ReportedPIDs(dir string) ([]int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("winsh: read reported PIDs: %w", err)
	}
	var pids []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		pids = append(pids, n)
	}
	return pids, nil
}

// Run interprets line and returns its exit status.
func Run(line string, stdin io.Reader, stdout, stderr io.Writer) int {
	stmts, err := Parse(line)
	if err != nil {
		fmt.Fprintf(stderr, "sh: %v\n", err)
		return 2
	}
	status := 0
	for _, words := range stmts {
		var exit bool
		status, exit = builtin(words, status, stdin, stdout, stderr)
		if exit {
			return status
		}
	}
	return status
}

func builtin(words []string, last int, stdin io.Reader, stdout, stderr io.Writer) (status int, exit bool) {
	name, args := words[0], words[1:]
	switch name {
	case "echo":
		fmt.Fprintln(stdout, strings.Join(args, " "))
		return 0, false
	case "exit":
		if len(args) == 0 {
			return last, true
		}
		n, err := strconv.Atoi(args[0])
		if err != nil {
			fmt.Fprintf(stderr, "sh: exit: %s: numeric argument required\n", args[0])
			return 2, true
		}
		return n & 0xff, true
	case "sleep":
		if len(args) != 1 {
			fmt.Fprintln(stderr, "sh: sleep: give one number of seconds")
			return 2, false
		}
		secs, err := strconv.ParseFloat(args[0], 64)
		if err != nil {
			fmt.Fprintf(stderr, "sh: sleep: %v\n", err)
			return 2, false
		}
		time.Sleep(time.Duration(secs * float64(time.Second)))
		return 0, false
	case "pid":
		if len(args) != 1 {
			fmt.Fprintln(stderr, "sh: pid: give one directory")
			return 2, false
		}
		if err := os.WriteFile(filepath.Join(args[0], strconv.Itoa(os.Getpid())), nil, 0o644); err != nil {
			fmt.Fprintf(stderr, "sh: pid: %v\n", err)
			return 1, false
		}
		return 0, false
	case "spawn":
		if len(args) != 1 {
			fmt.Fprintln(stderr, "sh: spawn: give one command line (quote it)")
			return 2, false
		}
		if err := spawn(args[0], stdin, stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "sh: spawn: %v\n", err)
			return 1, false
		}
		return 0, false
	case "cat":
		if _, err := io.Copy(stdout, stdin); err != nil {
			fmt.Fprintf(stderr, "sh: cat: %v\n", err)
			return 1, false
		}
		return 0, false
	}
	fmt.Fprintf(stderr, "sh: %s: not found\n", name)
	return 127, false
}

// spawn starts this executable as sh again, in the background. The child
// gets the same standard handles, as a shell's `cmd &` does, so a member
// that outlives the leader keeps the output open, as real ones do.
func spawn(line string, stdin io.Reader, stdout, stderr io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, "-c", line)
	// argv[0] must name sh for the child to act as one; os.Executable is
	// the sh.exe copy already when this process runs as the stand-in.
	if !startedAsShell([]string{self}) {
		return errors.New("spawn works only in a process started as sh")
	}
	err = RetryCreateGlitch(func() error {
		cmd = exec.Command(self, "-c", line)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
		return cmd.Start()
	})
	if err != nil {
		return err
	}
	// Not waited for: the child runs on after this statement and after
	// this shell exits (an orphan), which is what tree tests need.
	return cmd.Process.Release()
}

// Parse splits line into statements of words. Quotes keep blanks, ";" and
// newlines inside a word; an unterminated quote is an error.
func Parse(line string) ([][]string, error) {
	var (
		stmts [][]string
		words []string
		word  strings.Builder
		in    bool // a word has begun (an empty '' counts)
	)
	endWord := func() {
		if in {
			words = append(words, word.String())
			word.Reset()
			in = false
		}
	}
	endStmt := func() {
		endWord()
		if len(words) > 0 {
			stmts = append(stmts, words)
			words = nil
		}
	}
	for i := 0; i < len(line); i++ {
		switch c := line[i]; c {
		case ' ', '\t', '\r':
			endWord()
		case ';', '\n':
			endStmt()
		case '\'', '"':
			j := strings.IndexByte(line[i+1:], c)
			if j < 0 {
				return nil, fmt.Errorf("unterminated %c quote", c)
			}
			word.WriteString(line[i+1 : i+1+j])
			in = true
			i += j + 1
		default:
			word.WriteByte(c)
			in = true
		}
	}
	endStmt()
	return stmts, nil
}

// RemoveTree removes dir and everything in it, one entry at a time, retrying
// for up to 5 s while a file is still in use (the image of an sh.exe that
// just ended). os.RemoveAll cannot be used: under Wine 8.0 it fails on a
// non-empty directory ("unlinkat: Invalid function": Go deletes through
// FileDispositionInformationEx, which Wine lacks), while os.Remove works.
func RemoveTree(dir string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := removeTree(dir)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			// The os errors name the path already.
			return fmt.Errorf("winsh: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func removeTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if e.IsDir() {
			err = removeTree(p)
		} else {
			err = os.Remove(p)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// errInternal is Windows' ERROR_INTERNAL_ERROR ("Internal error."): no
// errno of another system has this number.
const errInternal = syscall.Errno(1359)

// RetryCreateGlitch runs start again, up to twice, when process creation
// fails with ERROR_INTERNAL_ERROR. Wine 8.0's CreateProcess fails so now
// and then (about once in 50 tree starts here, for plain os/exec starts as
// well as corral's); Windows does not, and nothing a test checks depends
// on a start that failed so.
func RetryCreateGlitch(start func() error) error {
	var err error
	for range 3 {
		if err = start(); !errors.Is(err, errInternal) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}
