package local

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
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
			"windows: KILL, TERM, INT, HUP and QUIT all terminate the job at once (no graceful stop) and the status reads killed by that signal; other signals are unsupported",
			"windows: a released process's tree ends once its leader has exited (its job is closed then)",
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
	// KILL_ON_JOB_CLOSE: a supervisor that dies without Close (its handle
	// closed by the system) still takes its trees with it. No BREAKAWAY_OK:
	// a member asking CREATE_BREAKAWAY_FROM_JOB is refused.
	info.BasicLimitInformation.LimitFlags = windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
	if _, err := windows.SetInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		_ = windows.CloseHandle(job)
		return nil, fmt.Errorf("configure job object: %w", err)
	}
	return &jobTree{job: job}, nil
}

// jobTree is a Job Object: every process the leader creates stays in it.
//
// The tree is the job handle's one owner. The handle is used only under mu
// and zeroed when it is closed: the waiter, Signal, Close and Release's
// goroutine all reach it, and a closed handle's value can be given to a
// new object (another tree's job) at once.
type jobTree struct {
	mu  sync.Mutex
	job windows.Handle // 0 once released
	// killed has bit N set when corral terminated the job with signal N
	// while the leader ran: every member then exits with terminateCode(N),
	// and the leader's status reads "killed by" N, not a plain exit code.
	killed uint64
}

// terminateCode is the exit code TerminateJobObject gives the members for
// sig: 128+N, what a POSIX shell reports for a child killed by signal N, so
// a code seen by anything outside corral still reads as that signal.
func terminateCode(sig syscall.Signal) uint32 { return 128 + uint32(sig) }

// prepare has the leader created suspended: started puts it in the job
// before it runs its first instruction, so nothing it creates can start
// outside the job. (os/exec has no way to pass PROC_THREAD_ATTRIBUTE_JOB_LIST,
// which would create it inside the job directly; a CreateProcess of our own
// would have to redo os/exec's handle inheritance, environment block and
// argument quoting.)
func (t *jobTree) prepare(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.CreationFlags |= windows.CREATE_SUSPENDED
	return nil
}

// started assigns the suspended leader to the job, then lets it run. On an
// error the leader is still suspended: the caller ends it and fails the
// start.
func (t *jobTree) started(p *os.Process) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.job == 0 {
		return errors.New("the job was released before the process started")
	}
	h, err := windows.OpenProcess(windows.PROCESS_SET_QUOTA|windows.PROCESS_TERMINATE, false, uint32(p.Pid))
	if err != nil {
		return fmt.Errorf("open process %d: %w", p.Pid, err)
	}
	defer windows.CloseHandle(h)
	if err := assignProcessToJob(t.job, h); err != nil {
		return fmt.Errorf("assign process %d to its job: %w", p.Pid, err)
	}
	if err := resumeProcess(uint32(p.Pid)); err != nil {
		return fmt.Errorf("resume process %d: %w", p.Pid, err)
	}
	return nil
}

// assignProcessToJob is AssignProcessToJobObject; a test makes it fail to
// see that the start fails and leaves no process behind.
var assignProcessToJob = windows.AssignProcessToJobObject

// resumeProcess resumes the threads of a process created suspended. os/exec
// closes the thread handle CreateProcess returned, so the threads are found
// in a toolhelp snapshot; a suspended new process has exactly one.
func resumeProcess(pid uint32) error {
	snap, err := windows.CreateToolhelp32Snapshot(windows.TH32CS_SNAPTHREAD, 0)
	if err != nil {
		return fmt.Errorf("snapshot threads: %w", err)
	}
	defer windows.CloseHandle(snap)
	entry := windows.ThreadEntry32{Size: uint32(unsafe.Sizeof(windows.ThreadEntry32{}))}
	resumed := 0
	for err = windows.Thread32First(snap, &entry); err == nil; err = windows.Thread32Next(snap, &entry) {
		if entry.OwnerProcessID != pid {
			continue
		}
		th, oerr := windows.OpenThread(windows.THREAD_SUSPEND_RESUME, false, entry.ThreadID)
		if oerr != nil {
			return fmt.Errorf("open thread %d: %w", entry.ThreadID, oerr)
		}
		_, rerr := windows.ResumeThread(th)
		_ = windows.CloseHandle(th)
		if rerr != nil {
			return fmt.Errorf("resume thread %d: %w", entry.ThreadID, rerr)
		}
		resumed++
	}
	if !errors.Is(err, windows.ERROR_NO_MORE_FILES) {
		return fmt.Errorf("list threads: %w", err)
	}
	if resumed == 0 {
		return errors.New("no thread of it found")
	}
	return nil
}

func (t *jobTree) abort()        { t.release() }
func (t *jobTree) cleanup() bool { return true }

// release closes the job handle; with KILL_ON_JOB_CLOSE that ends whatever
// is left in it, so it is called only once the tree is done with. Every
// later call finds the tree gone.
func (t *jobTree) release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.job != 0 {
		_ = windows.CloseHandle(t.job)
		t.job = 0
	}
}

func (t *jobTree) signal(sig syscall.Signal, leaderLive bool) error {
	switch sig {
	case syscall.SIGKILL, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT:
	default:
		return fmt.Errorf("signal %d on windows: %w", int(sig), env.ErrUnsupported)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.job == 0 {
		return nil // released: closing the job ended the tree
	}
	if leaderLive {
		// Once the leader has exited its code is final: a kill then must
		// not turn its own exit into "killed by".
		t.killed |= 1 << uint(sig)
	}
	if err := windows.TerminateJobObject(t.job, terminateCode(sig)); err != nil {
		return fmt.Errorf("terminate job: %w", err)
	}
	return nil
}

func (t *jobTree) survivors(bool) ([]int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.job == 0 {
		return nil, nil // released: closing the job ended the tree
	}
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

// exitStatus is the leader's status: "killed by" the signal corral
// terminated the job with, else its exit code. A leader that exits by
// itself with 128+N while corral terminates it with N reads as killed;
// nothing else does.
func (t *jobTree) exitStatus(ps *os.ProcessState) env.ExitStatus {
	code := ps.ExitCode()
	t.mu.Lock()
	killed := t.killed
	t.mu.Unlock()
	if n := code - 128; n > 0 && n < 64 && killed&(1<<uint(n)) != 0 {
		if name := env.SignalFromNumber(n); name != "" {
			return env.Signaled(name)
		}
	}
	return env.Exited(code)
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
