package sdk

import "github.com/corralhq/corral/internal/procstat"

// HostProcess names one process of the plugin's host for as long as it
// runs, and never another one: its PID with its start time. A PID alone is
// handed to the next process once its owner ends; the pair is not.
//
// A plugin whose sandbox lives in a host process (the init of a bwrap
// sandbox, a VM monitor) records the HostProcess to find the sandbox again
// after a plugin crash, and checks [HostProcess.Running] before entering or
// signalling it, so a stranger that inherited the PID is never taken for
// the sandbox.
//
// It reads /proc/PID/stat, so it works on Linux; elsewhere
// [FindHostProcess] fails and Running reports false. The fields are plain
// values: store them as they are.
type HostProcess struct {
	PID int
	// StartTime is when the process started, in clock ticks after boot
	// (field 22 of /proc/PID/stat).
	StartTime uint64
}

// FindHostProcess returns the HostProcess of the running process pid. It
// fails for a process that does not exist or has already exited (a
// zombie): a record of it would name nothing.
func FindHostProcess(pid int) (HostProcess, error) {
	id, err := procstat.Identify(pid)
	if err != nil {
		return HostProcess{}, err
	}
	return HostProcess{PID: id.PID, StartTime: id.StartTime}, nil
}

// Running reports whether p still runs: its PID exists, belongs to the
// process that started at p.StartTime, and that process has not exited.
func (p HostProcess) Running() bool {
	return procstat.Identity{PID: p.PID, StartTime: p.StartTime}.Alive()
}
