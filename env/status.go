package env

import "fmt"

// ExitStatus is how a process ended: with an exit code, or by a signal.
// Exactly one of the two is meaningful: when Signal is non-empty, Code is -1.
type ExitStatus struct {
	Code   int    `json:"code"`
	Signal Signal `json:"signal,omitempty"`
	// OOMKilled: the kernel's OOM killer ended the process (or, for a
	// shell that reports its child's SIGKILL as code 137, the child). A
	// backend sets it where the kernel's record is readable: the process
	// ended by SIGKILL (or with code 137) and the count of OOM kills of
	// its memory cgroup (cgroup v2 memory.events, v1 memory.oom_control)
	// rose between its start and its end. Where several processes share
	// one memory cgroup, a SIGKILL from elsewhere during the life of a
	// process whose neighbour was OOM-killed reads the same; backends
	// document what they can tell.
	OOMKilled bool `json:"oom_killed,omitempty"`
}

// NoStatus is the ExitStatus returned together with an error: no status is
// known (the process may still run, or its end was not seen). It is not
// Success, and it reads "no exit status", never "exit status 0": a caller
// that forgets to check the error cannot mistake it for a clean exit.
var NoStatus = ExitStatus{Code: -1}

// OutOfMemory is the words corral uses wherever it tells that the OOM
// killer ended a process (ExitStatus.String, a process's reason).
const OutOfMemory = "out of memory"

// Exited returns the status of a process that exited with code.
func Exited(code int) ExitStatus { return ExitStatus{Code: code} }

// Signaled returns the status of a process ended by sig.
func Signaled(sig Signal) ExitStatus { return ExitStatus{Code: -1, Signal: sig} }

// Success reports whether the process exited with code 0.
func (s ExitStatus) Success() bool { return s.Signal == "" && s.Code == 0 }

// ShellCode is the code a POSIX shell would report: Code, or 128+N when
// signal N ended the process.
func (s ExitStatus) ShellCode() int {
	if s.Signal != "" {
		if n := s.Signal.Number(); n > 0 {
			return 128 + n
		}
		return 128
	}
	return s.Code
}

func (s ExitStatus) String() string {
	if s == NoStatus {
		return "no exit status"
	}
	var str string
	if s.Signal != "" {
		str = fmt.Sprintf("killed by %s", s.Signal)
	} else {
		str = fmt.Sprintf("exit status %d", s.Code)
	}
	if s.OOMKilled {
		str += ", " + OutOfMemory
	}
	return str
}
