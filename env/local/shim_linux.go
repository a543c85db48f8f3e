package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Files of a detached process's directory.
const (
	fileShimConfig  = "shim.json"
	fileState       = "state.json"
	fileLog         = "log"
	fileExit        = "exit"
	fileStdin       = "stdin"
	fileStdinClosed = "stdin.closed"
	fileShimLog     = "shim.log"
)

// readyFD is the descriptor on which the shim reports "ok" (or the reason
// it failed) to the supervisor that started it.
const readyFD = 3

// shimConfig is what the supervisor asks the shim to run. The command's
// environment is the shim's own, minus shimEnvVar.
type shimConfig struct {
	Command string `json:"command"`
	Dir     string `json:"dir,omitempty"`
	Stdin   bool   `json:"stdin"`
	ID      string `json:"id"`
	// CgroupBase and CgroupRel place the command's cgroup; empty for
	// pgroup+scan, which uses Tag instead.
	CgroupBase string `json:"cgroup_base,omitempty"`
	CgroupRel  string `json:"cgroup_rel,omitempty"`
	Tag        string `json:"tag,omitempty"`
	SpecTag    string `json:"spec_tag,omitempty"`
}

// shimState is what the shim records once the command runs.
type shimState struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
	// Cgroup is the command's cgroup as /proc/PID/cgroup shows it.
	Cgroup      string `json:"cgroup,omitempty"`
	Tag         string `json:"tag,omitempty"`
	ShimPID     int    `json:"shim_pid"`
	ShimStart   uint64 `json:"shim_start_time"`
	Stdin       bool   `json:"stdin"`
	SpecTag     string `json:"spec_tag,omitempty"`
	CommandLine string `json:"command"`
}

func init() {
	v, ok := os.LookupEnv(shimEnvVar)
	if !ok {
		return
	}
	// This process is a shim, not the program it is a copy of: run the
	// shim and never return to main. syscall.Exit, not os.Exit: the
	// supervisor waits for the first stage, and a race-enabled binary
	// would otherwise linger a second in the race runtime's exit hook.
	syscall.Exit(shimMain(v))
}

func shimMain(v string) int {
	stage, dir, ok := strings.Cut(v, ":")
	if !ok || !filepath.IsAbs(dir) {
		fmt.Fprintf(os.Stderr, "corral shim: malformed %s\n", shimEnvVar)
		return 2
	}
	// Neither the second stage nor the command may inherit the readiness
	// pipe, or the supervisor would wait for the command to end.
	unix.CloseOnExec(readyFD)
	ready := os.NewFile(readyFD, "ready")
	switch stage {
	case "1":
		// Start the real shim and leave at once, so the supervisor reaps
		// this stage and the shim is re-parented away from it.
		self, err := shimExecutable()
		if err == nil {
			cmd := exec.Command(self)
			cmd.Args = []string{"corral-shim"}
			cmd.Env = append(os.Environ(), shimEnvVar+"=2:"+dir)
			cmd.Stderr = os.Stderr
			cmd.ExtraFiles = []*os.File{ready}
			err = cmd.Start()
			if err == nil {
				_ = cmd.Process.Release()
				return 0
			}
		}
		fmt.Fprintf(ready, "start shim: %v", err)
		return 1
	case "2":
		if err := runShim(dir, ready); err != nil {
			fmt.Fprintf(os.Stderr, "corral shim %s: %v\n", dir, err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "corral shim: unknown stage %q\n", stage)
	return 2
}

func runShim(dir string, ready *os.File) error {
	fail := func(err error) error {
		fmt.Fprintf(ready, "%v", err)
		_ = ready.Close()
		return err
	}
	data, err := os.ReadFile(filepath.Join(dir, fileShimConfig))
	if err != nil {
		return fail(err)
	}
	var cfg shimConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return fail(fmt.Errorf("parse %s: %w", fileShimConfig, err))
	}
	// Orphaned descendants come to the shim, which reaps them; this is the
	// shim's own process, never the supervisor's.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("become subreaper: %w", err))
	}
	// The shim must outlive a hangup, an INT and a broken pipe, but the
	// command must start with default dispositions: SIG_IGN would pass
	// through exec to it (traps would never fire, `yes | head` would
	// complain), while a caught signal is reset to SIG_DFL by exec.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP, syscall.SIGINT, syscall.SIGPIPE)

	logf, err := os.OpenFile(filepath.Join(dir, fileLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fail(err)
	}
	var stdinR, stdinKeep *os.File
	if cfg.Stdin {
		fifo := filepath.Join(dir, fileStdin)
		// Open the read end without waiting for a writer, then hold a write
		// end ourselves: the command sees EOF only when we let go of it.
		rfd, err := unix.Open(fifo, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(fmt.Errorf("open stdin fifo: %w", err))
		}
		wfd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(fmt.Errorf("open stdin fifo for writing: %w", err))
		}
		if err := unix.SetNonblock(rfd, false); err != nil {
			return fail(err)
		}
		stdinR = os.NewFile(uintptr(rfd), fifo)
		stdinKeep = os.NewFile(uintptr(wfd), fifo)
	} else {
		if stdinR, err = os.Open(os.DevNull); err != nil {
			return fail(err)
		}
	}

	cmd := exec.Command("/bin/sh", "-c", cfg.Command)
	cmd.Dir = cfg.Dir
	cmd.Env = dropVars(os.Environ(), func(name string) bool { return name == shimEnvVar })
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	var cgroupDir string
	if cfg.CgroupBase != "" {
		cgroupDir = filepath.Join(cfg.CgroupBase, cfg.ID)
		if err := os.Mkdir(cgroupDir, 0o755); err != nil {
			return fail(fmt.Errorf("create cgroup: %w", err))
		}
		fd, err := unix.Open(cgroupDir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(fmt.Errorf("open cgroup: %w", err))
		}
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = fd
		defer unix.Close(fd)
	} else {
		cmd.Env = append(cmd.Env, cfg.Tag+"=1")
	}
	if err := cmd.Start(); err != nil {
		if cgroupDir != "" {
			_ = os.Remove(cgroupDir)
		}
		return fail(fmt.Errorf("start %q: %w", cfg.Command, err))
	}
	_ = stdinR.Close()
	_ = logf.Close()
	pid := cmd.Process.Pid
	// The shim reaps with wait4 below; the pidfd os.Process holds is not
	// needed.
	_ = cmd.Process.Release()

	st := shimState{PID: pid, Tag: cfg.Tag, ShimPID: os.Getpid(), Stdin: cfg.Stdin, SpecTag: cfg.SpecTag, CommandLine: cfg.Command}
	if cgroupDir != "" {
		st.Cgroup = filepath.Join(cfg.CgroupRel, cfg.ID)
	}
	if s, err := readStat(pid); err == nil {
		st.StartTime = s.startTime
	}
	if s, err := readStat(os.Getpid()); err == nil {
		st.ShimStart = s.startTime
	}
	if err := writeJSONAtomic(filepath.Join(dir, fileState), st); err != nil {
		// The command runs; without its state nobody can attach. Kill it
		// rather than leave an unmanageable process behind.
		_ = unix.Kill(-pid, unix.SIGKILL)
		return fail(fmt.Errorf("record state: %w", err))
	}
	_, _ = ready.WriteString("ok")
	_ = ready.Close()

	closeStdin := make(chan struct{}, 1)
	if stdinKeep != nil {
		go watchStdinClosed(dir, closeStdin)
	}
	reaped := make(chan struct{})
	go func() {
		select {
		case <-closeStdin:
		case <-reaped:
		}
		if stdinKeep != nil {
			_ = stdinKeep.Close()
		}
	}()

	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.ECHILD) {
			break
		}
		if err != nil {
			return fmt.Errorf("wait: %w", err)
		}
		if got == pid {
			status := statusFromWait(syscall.WaitStatus(ws))
			if err := writeJSONAtomic(filepath.Join(dir, fileExit), status); err != nil {
				fmt.Fprintf(os.Stderr, "corral shim %s: record exit: %v\n", dir, err)
			}
			close(reaped)
		}
	}
	if cgroupDir != "" {
		_ = os.Remove(cgroupDir)
	}
	return nil
}

// watchStdinClosed signals once stdin.closed appears in dir.
func watchStdinClosed(dir string, closed chan<- struct{}) {
	marker := filepath.Join(dir, fileStdinClosed)
	defer func() { closed <- struct{}{} }()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		pollStdinClosed(dir)
		return
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_DELETE_SELF); err != nil {
		pollStdinClosed(dir)
		return
	}
	buf := make([]byte, 4096)
	for {
		if _, err := os.Stat(marker); err == nil || !dirExists(dir) {
			return
		}
		if _, err := unix.Read(fd, buf); err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// pollStdinClosed is the fallback where inotify is unavailable.
func pollStdinClosed(dir string) {
	marker := filepath.Join(dir, fileStdinClosed)
	for {
		if _, err := os.Stat(marker); err == nil || !dirExists(dir) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func dirExists(dir string) bool {
	_, err := os.Stat(dir)
	return !errors.Is(err, fs.ErrNotExist)
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
