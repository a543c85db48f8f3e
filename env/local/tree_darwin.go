package local

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"syscall"

	"github.com/corralhq/corral/env"
	"golang.org/x/sys/unix"
)

// system on darwin: no cgroups, so process groups only.
type system struct{}

func newSystem(bool, *slog.Logger) (*system, error) { return &system{}, nil }

func (s *system) capabilities() env.Capabilities {
	return env.Capabilities{
		PTY: true, Resize: true, Stdin: true,
		TreeKill: "pgroup",
		CheckURL: true,
		Notes: []string{
			"darwin: no listening-socket view (Ports): it reads Linux's /proc",
			"darwin: a tree is its process group; processes that leave it (setsid, daemons) are out of reach",
			"darwin: detached processes are not supported",
			"output of non-detached processes is a live stream: it can be opened once",
		},
	}
}

func (s *system) newTree(string) (tree, error) { return &pgroupTree{}, nil }

// pgroupTree is the process group the leader heads.
type pgroupTree struct{ pgid int }

func (t *pgroupTree) prepare(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
	return nil
}

func (t *pgroupTree) started(p *os.Process) error { t.pgid = p.Pid; return nil }
func (t *pgroupTree) abort()                      {}
func (t *pgroupTree) release()                    {}
func (t *pgroupTree) cleanup() bool               { return true }

// signal reaches the group only while the leader is unreaped: after that
// the group number could name a stranger's group.
func (t *pgroupTree) signal(sig syscall.Signal, leaderLive bool) error {
	if !leaderLive || t.pgid <= 0 {
		return nil
	}
	if err := unix.Kill(-t.pgid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill group %d: %w", t.pgid, err)
	}
	return nil
}

func (t *pgroupTree) survivors(leaderLive bool) ([]int, error) {
	if !leaderLive || t.pgid <= 0 {
		return nil, nil
	}
	procs, err := unix.SysctlKinfoProcSlice("kern.proc.pgrp", t.pgid)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, p := range procs {
		const zombie = 5 // SZOMB
		if p.Proc.P_stat != zombie {
			pids = append(pids, int(p.Proc.P_pid))
		}
	}
	return pids, nil
}

// waitNoReap blocks until p exits without reaping it (kqueue NOTE_EXIT),
// so its PID stays reserved.
func waitNoReap(p *os.Process) {
	kq, err := unix.Kqueue()
	if err != nil {
		return
	}
	defer unix.Close(kq)
	var ev unix.Kevent_t
	unix.SetKevent(&ev, p.Pid, unix.EVFILT_PROC, unix.EV_ADD|unix.EV_ONESHOT)
	ev.Fflags = unix.NOTE_EXIT
	out := make([]unix.Kevent_t, 1)
	for {
		_, err := unix.Kevent(kq, []unix.Kevent_t{ev}, out, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}
