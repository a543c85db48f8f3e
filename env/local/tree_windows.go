package local

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"unsafe"

	"github.com/corralhq/corral/env"
	"golang.org/x/sys/windows"
)

// system on windows: a Job Object per process tree.
type system struct{}

func newSystem(bool, *slog.Logger) (*system, error) { return &system{}, nil }

func (s *system) capabilities() env.Capabilities {
	return env.Capabilities{
		Stdin:    true,
		TreeKill: "job-object",
		CheckURL: true,
		Notes: []string{
			"windows: no listening-socket view (Ports): it reads Linux's /proc",
			"windows: no PTY, no detached processes",
			"windows: the process is assigned to its job right after it starts; children it creates in that instant escape",
			"windows: KILL, TERM, INT, HUP and QUIT all terminate the job; other signals are unsupported",
			"output of non-detached processes is a live stream: it can be opened once",
		},
	}
}

func (s *system) newTree(string) (tree, error) {
	job, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return nil, fmt.Errorf("create job object: %w", err)
	}
	info := windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION{}
	info.BasicLimitInformation.LimitFlags = windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
	if _, err := windows.SetInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		_ = windows.CloseHandle(job)
		return nil, fmt.Errorf("configure job object: %w", err)
	}
	return &jobTree{job: job}, nil
}

// jobTree is a Job Object: every process the leader creates stays in it.
type jobTree struct{ job windows.Handle }

func (t *jobTree) prepare(*exec.Cmd) error { return nil }

func (t *jobTree) started(p *os.Process) error {
	h, err := windows.OpenProcess(windows.PROCESS_SET_QUOTA|windows.PROCESS_TERMINATE, false, uint32(p.Pid))
	if err != nil {
		return fmt.Errorf("open process %d: %w", p.Pid, err)
	}
	defer windows.CloseHandle(h)
	if err := windows.AssignProcessToJobObject(t.job, h); err != nil {
		return fmt.Errorf("assign process %d to job: %w", p.Pid, err)
	}
	return nil
}

func (t *jobTree) abort()        { t.release() }
func (t *jobTree) cleanup() bool { return true }

// release closes the job handle; with KILL_ON_JOB_CLOSE that ends whatever
// is left in it, so it is called only once the tree is done with.
func (t *jobTree) release() {
	if t.job != 0 {
		_ = windows.CloseHandle(t.job)
		t.job = 0
	}
}

func (t *jobTree) signal(sig syscall.Signal, _ bool) error {
	switch sig {
	case syscall.SIGKILL, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT:
		if err := windows.TerminateJobObject(t.job, 1); err != nil {
			return fmt.Errorf("terminate job: %w", err)
		}
		return nil
	}
	return fmt.Errorf("signal %d on windows: %w", int(sig), env.ErrUnsupported)
}

func (t *jobTree) survivors(bool) ([]int, error) {
	// JOBOBJECT_BASIC_PROCESS_ID_LIST with room for 1024 PIDs.
	var list struct {
		Assigned uint32
		InList   uint32
		IDs      [1024]uintptr
	}
	err := windows.QueryInformationJobObject(t.job, windows.JobObjectBasicProcessIdList,
		uintptr(unsafe.Pointer(&list)), uint32(unsafe.Sizeof(list)), nil)
	if err != nil && !errors.Is(err, windows.ERROR_MORE_DATA) {
		return nil, fmt.Errorf("list job processes: %w", err)
	}
	pids := make([]int, 0, list.InList)
	for i := uint32(0); i < list.InList && i < uint32(len(list.IDs)); i++ {
		pids = append(pids, int(list.IDs[i]))
	}
	return pids, nil
}

// waitNoReap waits on a process handle; while the os.Process holds its own
// handle the PID cannot be reused, so nothing more is needed.
func waitNoReap(p *os.Process) {
	h, err := windows.OpenProcess(windows.SYNCHRONIZE, false, uint32(p.Pid))
	if err != nil {
		return
	}
	defer windows.CloseHandle(h)
	_, _ = windows.WaitForSingleObject(h, windows.INFINITE)
}
