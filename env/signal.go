package env

import (
	"fmt"
	"strconv"
	"strings"
)

// Signal is a POSIX signal by its portable name without the SIG prefix
// ("TERM", "KILL"). Names, not numbers, cross backends: numbering differs
// between kernels, names are what every shell's kill understands.
type Signal string

// Signals every backend must deliver.
const (
	SIGHUP   Signal = "HUP"
	SIGINT   Signal = "INT"
	SIGQUIT  Signal = "QUIT"
	SIGKILL  Signal = "KILL"
	SIGUSR1  Signal = "USR1"
	SIGUSR2  Signal = "USR2"
	SIGPIPE  Signal = "PIPE"
	SIGALRM  Signal = "ALRM"
	SIGTERM  Signal = "TERM"
	SIGCONT  Signal = "CONT"
	SIGSTOP  Signal = "STOP"
	SIGTSTP  Signal = "TSTP"
	SIGWINCH Signal = "WINCH"
)

// signalNumbers maps names to their Linux numbers, which also hold on macOS
// for all of these except USR1/USR2/CONT/STOP/TSTP (see Number).
var signalNumbers = map[Signal]int{
	SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, "ILL": 4, "TRAP": 5, "ABRT": 6, "BUS": 7, "FPE": 8,
	SIGKILL: 9, SIGUSR1: 10, "SEGV": 11, SIGUSR2: 12, SIGPIPE: 13, SIGALRM: 14, SIGTERM: 15,
	"STKFLT": 16, "CHLD": 17, SIGCONT: 18, SIGSTOP: 19, SIGTSTP: 20, "TTIN": 21, "TTOU": 22,
	"URG": 23, "XCPU": 24, "XFSZ": 25, "VTALRM": 26, "PROF": 27, SIGWINCH: 28, "IO": 29,
	"PWR": 30, "SYS": 31,
}

var signalNames = func() map[int]Signal {
	m := make(map[int]Signal, len(signalNumbers))
	for name, n := range signalNumbers {
		m[n] = name
	}
	return m
}()

// ParseSignal accepts "TERM", "SIGTERM", "term" or a Linux signal number
// ("15") and returns the canonical name. An unknown signal is an error that
// lists what is accepted.
func ParseSignal(s string) (Signal, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	if n, err := strconv.Atoi(t); err == nil {
		if name, ok := signalNames[n]; ok {
			return name, nil
		}
		return "", fmt.Errorf("unknown signal number %d: use 1-31 or a name such as TERM, INT, KILL, HUP", n)
	}
	t = strings.TrimPrefix(t, "SIG")
	if _, ok := signalNumbers[Signal(t)]; ok {
		return Signal(t), nil
	}
	return "", fmt.Errorf("unknown signal %q: use a name such as TERM, INT, KILL, HUP, QUIT, USR1, USR2 or a number 1-31", s)
}

// Number returns the Linux number of the signal, or 0 if unknown.
func (s Signal) Number() int { return signalNumbers[s] }

// SignalFromNumber returns the name of Linux signal n, or "" if unknown.
func SignalFromNumber(n int) Signal { return signalNames[n] }

// Valid reports whether s is a known signal name.
func (s Signal) Valid() bool { _, ok := signalNumbers[s]; return ok }

func (s Signal) String() string { return "SIG" + string(s) }
