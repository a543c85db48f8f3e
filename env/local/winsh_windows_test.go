package local

import (
	"bufio"
	"context"
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
	"unsafe"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/testing/winsh"
	"golang.org/x/sys/windows"
)

// The Windows tests need no sh.exe of their own: the test binary is the
// shell. A copy named sh.exe, first on PATH, is what shellPath finds; run
// as sh.exe -c SCRIPT it executes SCRIPT in winShell's little language.
// Started with winSupervisorVar set, it is instead a supervisor of its own
// (an Env in another process), for the cases that kill or jail the
// supervisor.
const (
	winSupervisorVar = "CORRAL_WINTEST_SUPERVISOR" // the command the supervisor starts
	winOuterJobVar   = "CORRAL_WINTEST_OUTER_JOB"  // "nested" or "silent": run the supervisor in a job
	winErrDirVar     = "CORRAL_WINTEST_ERRORS"     // where the shell writes its errors
)

// memberSleep bounds a tree member that nothing killed: a failed test must
// not leave processes for long (and every test kills what it knows of).
const memberSleep = 5 * time.Minute

func init() {
	// The shell role goes by the program's name, as PATH finds it: it
	// is taken here, before TestMain and the test flags, since the
	// arguments are a shell's.
	if strings.EqualFold(filepath.Base(os.Args[0]), "sh.exe") || strings.EqualFold(filepath.Base(os.Args[0]), "sh") {
		os.Exit(winShell(os.Args[1:]))
	}
	helperRoles[winSupervisorVar] = winSupervisor
}

// winShell runs sh -c SCRIPT, SCRIPT being commands separated by ";":
//
//	exit N            exit with code N
//	echo WORDS        WORDS and a newline on stdout
//	echoerr WORDS     the same on stderr
//	cat               copy stdin to stdout
//	big N             N bytes of bigPattern on stdout
//	sleep D           sleep for the Go duration D
//	injob             print "injob true" when this process is in a job
//	pid DIR           write DIR/<own PID> (members report themselves)
//	tree N DIR        pid DIR; start "tree N-1 DIR" when N > 1; sleep
//	orphan N DIR      pid DIR; start "tree N DIR" (and go on: at the
//	                  script's end this process exits, its child stays)
//	spawn COMMAND     start COMMAND (one command) as a child; go on
//	detached N DIR    pid DIR; start "tree N DIR" as DETACHED_PROCESS|
//	                  CREATE_NEW_PROCESS_GROUP; sleep
//	breakaway DIR     pid DIR; try to start "tree 1 DIR" with
//	                  CREATE_BREAKAWAY_FROM_JOB, print "breakaway refused"
//	                  or "breakaway started"; sleep
//
// Children inherit stdout and stderr, as a real shell's do: they hold the
// output open after their parent exits.
func winShell(args []string) int {
	if len(args) != 2 || args[0] != "-c" {
		fmt.Fprintf(os.Stderr, "sh (test stand-in): want -c SCRIPT, got %q\n", args)
		return 2
	}
	for _, command := range strings.Split(args[1], ";") {
		f := strings.Fields(command)
		if len(f) == 0 {
			continue
		}
		code, err := winShellCommand(f[0], f[1:])
		if err != nil {
			msg := fmt.Sprintf("sh (test stand-in) %d: %s: %v\n", os.Getpid(), command, err)
			fmt.Fprint(os.Stderr, msg)
			// The output is not always read: the test reads this file too.
			if dir := os.Getenv(winErrDirVar); dir != "" {
				_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("sh-%d.err", os.Getpid())), []byte(msg), 0o600)
			}
			return 2
		}
		if code >= 0 {
			return code
		}
	}
	return 0
}

// winShellCommand runs one command; a code >= 0 ends the script with it.
func winShellCommand(name string, args []string) (int, error) {
	arg := func(i int) string {
		if i < len(args) {
			return args[i]
		}
		return ""
	}
	num := func(i int) int { n, _ := strconv.Atoi(arg(i)); return n }
	switch name {
	case "exit":
		return num(0), nil
	case "echo":
		_, err := fmt.Fprintln(os.Stdout, strings.Join(args, " "))
		return -1, err
	case "echoerr":
		_, err := fmt.Fprintln(os.Stderr, strings.Join(args, " "))
		return -1, err
	case "cat":
		_, err := io.Copy(os.Stdout, os.Stdin)
		return -1, err
	case "big":
		_, err := os.Stdout.Write(bigPattern(num(0)))
		return -1, err
	case "sleep":
		d, err := time.ParseDuration(arg(0))
		time.Sleep(d)
		return -1, err
	case "injob":
		in, err := isProcessInJob(windows.CurrentProcess(), 0)
		fmt.Println("injob", in)
		return -1, err
	case "pid":
		return -1, reportPID(arg(0))
	case "tree":
		if err := reportPID(arg(1)); err != nil {
			return -1, err
		}
		if num(0) > 1 {
			if err := startMember(fmt.Sprintf("tree %d %s", num(0)-1, arg(1)), 0); err != nil {
				return -1, err
			}
		}
		time.Sleep(memberSleep)
		return 0, nil
	case "orphan":
		if err := reportPID(arg(1)); err != nil {
			return -1, err
		}
		return -1, startMember(fmt.Sprintf("tree %d %s", num(0), arg(1)), 0)
	case "spawn":
		return -1, startMember(strings.Join(args, " "), 0)
	case "detached":
		if err := reportPID(arg(1)); err != nil {
			return -1, err
		}
		err := startMember(fmt.Sprintf("tree %d %s", num(0), arg(1)), windows.DETACHED_PROCESS|windows.CREATE_NEW_PROCESS_GROUP)
		if err != nil {
			return -1, err
		}
		time.Sleep(memberSleep)
		return 0, nil
	case "breakaway":
		if err := reportPID(arg(0)); err != nil {
			return -1, err
		}
		if err := startMember("tree 1 "+arg(0), windows.CREATE_BREAKAWAY_FROM_JOB); err != nil {
			fmt.Println("breakaway refused:", err)
		} else {
			fmt.Println("breakaway started")
		}
		time.Sleep(memberSleep)
		return 0, nil
	}
	return -1, fmt.Errorf("unknown command %q", name)
}

// bigPattern is n bytes that cover every byte value, CR, LF and ^Z among
// them, in an order that a lost or repeated block would change.
func bigPattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i ^ i>>8 ^ i>>16)
	}
	return b
}

// reportPID creates dir/<PID>: the test learns the members from the
// members themselves, not from the code under test.
func reportPID(dir string) error {
	if dir == "" {
		return errors.New("pid: no directory given")
	}
	return os.WriteFile(filepath.Join(dir, strconv.Itoa(os.Getpid())), nil, 0o600)
}

// startMember starts this binary as sh -c script, not waited for.
func startMember(script string, flags uint32) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var cmd *exec.Cmd
	err = winsh.RetryCreateGlitch(func() error {
		cmd = exec.Command(self, "-c", script)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{CreationFlags: flags}
		return cmd.Start()
	})
	if err != nil {
		return err
	}
	return cmd.Process.Release()
}

var procIsProcessInJob = windows.NewLazySystemDLL("kernel32.dll").NewProc("IsProcessInJob")

// isProcessInJob is kernel32's IsProcessInJob; job 0 asks about any job.
func isProcessInJob(process, job windows.Handle) (bool, error) {
	var in int32
	r, _, err := procIsProcessInJob.Call(uintptr(process), uintptr(job), uintptr(unsafe.Pointer(&in)))
	if r == 0 {
		return false, err
	}
	return in != 0, nil
}

// winSupervisor runs an Env in this process: it starts the command in
// winSupervisorVar, prints "started <PID>", then obeys stdin lines:
// "kill" (Signal KILL, then print "status <Wait's status>") and "close"
// (print "closed <Close's error or ok>"). At EOF it exits without Close.
// With winOuterJobVar it first puts itself in a job, as a CI runner or an
// IDE does: "nested" a plain one, "silent" one with SILENT_BREAKAWAY_OK
// (its children start outside it).
func winSupervisor() int {
	fail := func(err error) int {
		fmt.Println("error", err)
		return 1
	}
	if kind := os.Getenv(winOuterJobVar); kind != "" {
		job, err := windows.CreateJobObject(nil, nil)
		if err != nil {
			return fail(err)
		}
		if kind == "silent" {
			info := windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION{}
			info.BasicLimitInformation.LimitFlags = windows.JOB_OBJECT_LIMIT_SILENT_BREAKAWAY_OK
			if _, err := windows.SetInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
				uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
				return fail(err)
			}
		}
		if err := windows.AssignProcessToJobObject(job, windows.CurrentProcess()); err != nil {
			return fail(fmt.Errorf("enter outer job: %w", err))
		}
	}
	state, err := os.MkdirTemp("", "corral-wintest-supervisor-*")
	if err != nil {
		return fail(err)
	}
	defer func() { _ = removeTree(state) }()
	e, err := New(Options{StateDir: state})
	if err != nil {
		return fail(err)
	}
	p, err := e.Start(context.Background(), env.Spec{Command: os.Getenv(winSupervisorVar)})
	if err != nil {
		return fail(err)
	}
	fmt.Println("started", p.PID())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "kill":
			if err := p.Signal(context.Background(), env.SIGKILL); err != nil {
				fmt.Println("error", err)
				continue
			}
			// Bounded, so that a kill that misses the leader fails the
			// test instead of hanging it.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			st, err := p.Wait(ctx)
			cancel()
			if err != nil {
				fmt.Println("error", err)
				continue
			}
			fmt.Println("status", st)
		case "close":
			if err := e.Close(); err != nil {
				fmt.Println("closed", err)
			} else {
				fmt.Println("closed ok")
			}
		}
	}
	return 0
}
