package env

import "fmt"

// ExitStatus is how a process ended: with an exit code, or by a signal.
// Exactly one of the two is meaningful: when Signal is non-empty, Code is -1.
type ExitStatus struct {
	Code   int    `json:"code"`
	Signal Signal `json:"signal,omitempty"`
}

// NoStatus is the ExitStatus returned together with an error: no status is
// known (the process may still run, or its end was not seen). It is not
// Success, and it reads "no exit status", never "exit status 0": a caller
// that forgets to check the error cannot mistake it for a clean exit.
var NoStatus = ExitStatus{Code: -1}

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
	if s.Signal != "" {
		return fmt.Sprintf("killed by %s", s.Signal)
	}
	return fmt.Sprintf("exit status %d", s.Code)
}
