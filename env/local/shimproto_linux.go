package local

import (
	"encoding/json"
	"os"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/procstat"
)

// Files of a detached process's directory.
const (
	fileState       = "state.json"
	fileLog         = "log"
	fileExit        = "exit"
	fileStdin       = "stdin"
	fileStdinClosed = "stdin.closed"
	fileShimLog     = "shim.log"
	// fileCommand holds a command too long for argv, which the shell
	// sources (see env.InlineCommandMax).
	fileCommand = "command"
	// fileOmitted records the range of the log dropped to keep it
	// bounded (see env.LogKeep).
	fileOmitted = "omitted"
)

// shimConfig is what a supervisor asks the shim server to run.
type shimConfig struct {
	Command string `json:"command"`
	Dir     string `json:"dir,omitempty"`
	// Env is the command's whole environment (the server's own is not
	// passed on).
	Env   []string `json:"env"`
	Stdin bool     `json:"stdin"`
	// PTY, when set, runs the command on a terminal of this size whose
	// master the server holds.
	PTY *env.WindowSize `json:"pty,omitempty"`
	ID  string          `json:"id"`
	// CgroupBase and CgroupRel place the command's cgroup; empty for
	// pgroup+scan, which uses Tag instead.
	CgroupBase string `json:"cgroup_base,omitempty"`
	CgroupRel  string `json:"cgroup_rel,omitempty"`
	Tag        string `json:"tag,omitempty"`
	SpecTag    string `json:"spec_tag,omitempty"`
	// Limits are the command's env.Limits, enforced by the server's fork.
	Limits *env.Limits `json:"limits,omitempty"`
	// Ceiling names the supervisor's ceiling cgroup (ceilingName), which
	// holds the command's limit cgroups; "" for none.
	Ceiling string `json:"ceiling,omitempty"`
}

// shimState is what the server records once the command runs.
type shimState struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
	// Cgroup is the command's cgroup as /proc/PID/cgroup shows it.
	Cgroup string `json:"cgroup,omitempty"`
	Tag    string `json:"tag,omitempty"`
	// ShimPID and ShimStart name the shim server that runs the command.
	ShimPID     int    `json:"shim_pid"`
	ShimStart   uint64 `json:"shim_start_time"`
	Stdin       bool   `json:"stdin"`
	PTY         bool   `json:"pty,omitempty"`
	SpecTag     string `json:"spec_tag,omitempty"`
	CommandLine string `json:"command"`
	// Server is the protocol version of the shim server that runs the
	// process, which records the exit as a second line of state.json; 0
	// names the per-process shim of earlier versions, which wrote a
	// separate exit file.
	Server int `json:"server,omitempty"`
}

// leader and shim are the recorded identities of the command and of the
// shim server that runs it.
func (s shimState) leader() procstat.Identity {
	return procstat.Identity{PID: s.PID, StartTime: s.StartTime}
}

func (s shimState) shim() procstat.Identity {
	return procstat.Identity{PID: s.ShimPID, StartTime: s.ShimStart}
}

// shimProtocol is the version of the conversation between supervisor and
// shim server. It is part of the socket's and the lock's names, so servers
// of different versions never meet: an old server keeps running the
// processes it started (their files work for Attach whatever the version)
// and a new one takes new starts.
const shimProtocol = 1

// shimHello is what the server sends first on every connection.
type shimHello struct {
	Version   int    `json:"version"`
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
}

// shimRequest is one request; exactly one reply follows it.
type shimRequest struct {
	Op    string          `json:"op"` // "start" or "resize"
	ID    string          `json:"id"`
	Start *shimConfig     `json:"start,omitempty"`
	Size  *env.WindowSize `json:"size,omitempty"`
}

type shimReply struct {
	Error string     `json:"error,omitempty"`
	State *shimState `json:"state,omitempty"`
	// Gone: the request named a process the server no longer holds (it
	// exited, or another server runs it).
	Gone bool `json:"gone,omitempty"`
}

func appendExit(path string, status env.ExitStatus) error {
	data, err := json.Marshal(status)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(append(data, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeJSONAtomic writes v to path via a temporary file and a rename, so
// a reader sees the whole file or none. No fsync: these files describe
// processes, which a machine crash ends anyway; what matters is that no
// reader ever sees half a file.
func writeJSONAtomic(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	// A line: the exit status may follow it (see recordExit).
	data = append(data, '\n')
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}
