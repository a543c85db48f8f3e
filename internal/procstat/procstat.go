// Package procstat reads /proc/PID/stat, the kernel's one-line summary of a
// process, and tells whether a recorded process is still the one running
// under its PID: corral's one parser of that file, for env/local's trees
// and detached processes, the plugin host's liveness check, the plugin SDK
// and the test sshd's process walk.
//
//   - [Parse] reads the fields corral needs from the text of the file;
//     [Read] reads and parses the file of one PID. [Stat.Exited] tells a
//     zombie (or a dead task) from a live process.
//   - [Identity] is a PID with the process's start time; [Identify]
//     records one, [Identity.Alive] checks it later.
//
// Decisions:
//   - The command name (field 2) is the executable's base name, chosen by
//     whoever named the file: it may contain spaces, parentheses, ") " and
//     newlines. The fields after it are found from the LAST ')' of the
//     file, since no field after the name can contain one; the name is what
//     lies between the first '(' and that ')'. Splitting on spaces, or on
//     the first ')', would let a process named "x) Z 1" forge its own state.
//   - A PID alone does not name a process: once it ends, the kernel hands
//     the number to the next process. The start time (field 22, clock ticks
//     after boot) never repeats for one PID, so a PID with its start time
//     does. Every check before a signal to a recorded PID goes through
//     [Identity.Alive].
//   - A zombie has ended: it cannot be signalled into doing anything and
//     its PID is about to be freed. [Identity.Alive] is therefore false for
//     one, and [Identify] refuses to record one.
//   - The package compiles everywhere; without /proc (not Linux) [Read]
//     fails with an error matching fs.ErrNotExist, which callers use to
//     tell "no such process" from "cannot know".
package procstat

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrMalformed is matched (errors.Is) by every error about stat text that
// does not have the kernel's shape.
var ErrMalformed = errors.New("malformed /proc/PID/stat")

// Stat holds the fields of /proc/PID/stat that corral uses.
type Stat struct {
	PID   int    // field 1
	Comm  string // field 2 without its parentheses: the executable's base name, at most 15 bytes
	State byte   // field 3: R running, S sleeping, D disk sleep, T stopped, Z zombie, X dead, …
	PPID  int    // field 4: the parent's PID
	PGID  int    // field 5: the process group
	// TTY is field 7, the controlling terminal's device number as the
	// kernel encodes it (unix.Mkdev's encoding), 0 without one; TPGID is
	// field 8, the foreground process group of that terminal, -1 without.
	TTY   uint64
	TPGID int
	// StartTime is field 22: when the process started, in clock ticks
	// after boot. With the PID it names the process (see Identity).
	StartTime uint64
	// UTime and STime (fields 14 and 15) are the CPU time the process
	// spent in user and kernel mode; CUTime and CSTime (16 and 17) that of
	// the children it has waited for. All are in clock ticks (TicksPerSecond).
	UTime, STime, CUTime, CSTime uint64
}

// TicksPerSecond is the unit of Stat's times (USER_HZ). Linux fixes it at
// 100 on every architecture Go supports: the kernel converts its internal
// HZ to it for /proc, precisely so that user space may rely on it, and
// reading it through sysconf(_SC_CLK_TCK) would need cgo.
const TicksPerSecond = 100

// CPU is the process's CPU time, user plus system, its own and that of
// the children it has reaped, in clock ticks.
func (s Stat) CPU() uint64 { return s.UTime + s.STime + s.CUTime + s.CSTime }

// Exited reports whether the process has ended: a zombie waiting to be
// reaped, or a task being torn down.
func (s Stat) Exited() bool { return s.State == 'Z' || s.State == 'X' }

// Read reads and parses /proc/PID/stat. A PID without a process (or a
// system without /proc) gives an error matching fs.ErrNotExist.
func Read(pid int) (Stat, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err // an *fs.PathError: it names the file
	}
	st, err := Parse(data)
	if err != nil {
		return Stat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return st, nil
}

// Parse parses the text of a /proc/PID/stat file: "PID (COMM) STATE PPID
// PGRP ...", with at least the 22 fields up to the start time.
func Parse(data []byte) (Stat, error) {
	open := bytes.IndexByte(data, '(')
	closing := bytes.LastIndexByte(data, ')')
	if open < 0 || closing < open {
		return Stat{}, fmt.Errorf("%w: no (command name)", ErrMalformed)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data[:open])))
	if err != nil {
		return Stat{}, fmt.Errorf("%w: pid: %w", ErrMalformed, err)
	}
	// f[0] is field 3 (state): field N is f[N-3].
	f := strings.Fields(string(data[closing+1:]))
	if len(f) < 20 {
		return Stat{}, fmt.Errorf("%w: %d fields after the command name, want at least 20", ErrMalformed, len(f))
	}
	if len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("%w: state %q is not one letter", ErrMalformed, f[0])
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgid, err2 := strconv.Atoi(f[2])
	start, err3 := strconv.ParseUint(f[19], 10, 64)
	tty, err4 := strconv.ParseInt(f[4], 10, 64)
	tpgid, err5 := strconv.Atoi(f[5])
	var times [4]uint64
	var errs []error
	for i := range times {
		// cutime and cstime are signed in the kernel's format; they are
		// never negative in practice, and a negative one is malformed.
		v, err := strconv.ParseUint(f[11+i], 10, 64)
		times[i] = v
		errs = append(errs, err)
	}
	if err := errors.Join(append(errs, err1, err2, err3, err4, err5)...); err != nil {
		return Stat{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return Stat{
		PID:       pid,
		Comm:      string(data[open+1 : closing]),
		State:     f[0][0],
		PPID:      ppid,
		PGID:      pgid,
		TTY:       uint64(uint32(tty)),
		TPGID:     tpgid,
		StartTime: start,
		UTime:     times[0],
		STime:     times[1],
		CUTime:    times[2],
		CSTime:    times[3],
	}, nil
}

// Identity names one process for as long as it runs, and never another
// one: its PID and its start time. It is comparable and serialisable, so
// it can be recorded and checked after a restart.
type Identity struct {
	PID       int
	StartTime uint64 // clock ticks after boot, as in Stat.StartTime
}

// Identify records the identity of the running process pid. It fails for
// a process that has already exited (a zombie): its PID is about to be
// freed, and a record of it would name nothing.
func Identify(pid int) (Identity, error) {
	st, err := Read(pid)
	if err != nil {
		return Identity{}, err
	}
	if st.Exited() {
		return Identity{}, fmt.Errorf("process %d has exited (state %c)", pid, st.State)
	}
	return Identity{PID: pid, StartTime: st.StartTime}, nil
}

// Alive reports whether the process id names is still running: its PID
// exists, started at the recorded time (so it was not reused), and has not
// exited.
func (id Identity) Alive() bool {
	st, err := Read(id.PID)
	return err == nil && st.StartTime == id.StartTime && !st.Exited()
}
