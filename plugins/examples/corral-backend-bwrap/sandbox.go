//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
	"github.com/corralhq/corral/plugins/sdk"
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// record identifies a running sandbox: the host PID of its init and that
// process's start time, so a reused PID is never taken for the sandbox.
type record struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// sandbox is a running bwrap sandbox and the nohup.Transport into it.
type sandbox struct {
	rec  record
	name string
}

func open(ctx context.Context, target string) (nohup.Transport, nohup.Options, error) {
	rest, ok := strings.CutPrefix(target, "bwrap://")
	if !ok {
		return nil, nohup.Options{}, fmt.Errorf("bwrap: target %q: want bwrap://[NAME][?state=DIR]", target)
	}
	name, query, _ := strings.Cut(rest, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, nohup.Options{}, fmt.Errorf("bwrap: target %q: %w", target, err)
	}
	for _, tool := range []string{"bwrap", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, nohup.Options{}, fmt.Errorf("bwrap: %s not found (apt-get install bubblewrap util-linux): %w", tool, env.ErrUnsupported)
		}
	}
	opts := nohup.Options{Name: "bwrap://" + name}
	if name == "" {
		rec, err := create(ctx, true)
		if err != nil {
			return nil, nohup.Options{}, err
		}
		opts.OnClose = func() error { return syscall.Kill(rec.PID, syscall.SIGKILL) }
		return &sandbox{rec: rec, name: "(ephemeral)"}, opts, nil
	}
	if !nameRE.MatchString(name) {
		return nil, nohup.Options{}, fmt.Errorf("bwrap: sandbox name %q: must match [A-Za-z0-9_.-]{1,64}", name)
	}
	dir := q.Get("state")
	if dir == "" {
		dir = defaultStateDir()
	}
	rec, err := openNamed(ctx, dir, name)
	if err != nil {
		return nil, nohup.Options{}, err
	}
	return &sandbox{rec: rec, name: name}, opts, nil
}

func defaultStateDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "corral-bwrap")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("corral-bwrap-%d", os.Getuid()))
}

// openNamed finds the named sandbox's record or creates the sandbox, under
// a lock so two plugins opening one name at once create it once.
func openNamed(ctx context.Context, dir, name string) (record, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return record{}, fmt.Errorf("bwrap: state directory: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, name+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return record{}, fmt.Errorf("bwrap: lock %s: %w", name, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return record{}, fmt.Errorf("bwrap: lock %s: %w", name, err)
	}
	path := filepath.Join(dir, name+".json")
	if b, err := os.ReadFile(path); err == nil {
		var rec record
		if json.Unmarshal(b, &rec) == nil && rec.alive() {
			return rec, nil
		}
	}
	rec, err := create(ctx, false)
	if err != nil {
		return record{}, err
	}
	b, _ := json.Marshal(rec)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		syscall.Kill(rec.PID, syscall.SIGKILL)
		return record{}, fmt.Errorf("bwrap: record sandbox %s: %w", name, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		syscall.Kill(rec.PID, syscall.SIGKILL)
		return record{}, fmt.Errorf("bwrap: record sandbox %s: %w", name, err)
	}
	return rec, nil
}

// bwrapArgs are the isolation settings of every sandbox.
var bwrapArgs = []string{
	"--ro-bind", "/", "/",
	"--tmpfs", "/tmp",
	"--dev", "/dev",
	"--proc", "/proc",
	"--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
	"--new-session",
	"--chdir", "/tmp",
}

// create starts a sandbox and returns its init's record. An ephemeral one
// dies with the plugin; a named one is started in its own session and
// outlives it.
func create(ctx context.Context, ephemeral bool) (record, error) {
	infoR, infoW, err := os.Pipe()
	if err != nil {
		return record{}, fmt.Errorf("bwrap: %w", err)
	}
	defer infoR.Close()
	args := append([]string(nil), bwrapArgs...)
	if ephemeral {
		args = append(args, "--die-with-parent")
	}
	// bwrap reports the child's PID before it has set up the mounts; the
	// init command's first line says the sandbox is complete.
	args = append(args, "--info-fd", "3", "--", "/bin/sh", "-c", "echo ready; exec sleep infinity </dev/null >/dev/null 2>&1")
	cmd := exec.Command("bwrap", args...)
	cmd.ExtraFiles = []*os.File{infoW}
	readyR, err := cmd.StdoutPipe()
	if err != nil {
		infoW.Close()
		return record{}, fmt.Errorf("bwrap: %w", err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		infoW.Close()
		return record{}, fmt.Errorf("bwrap: start sandbox: %w", err)
	}
	infoW.Close()
	// bwrap is our child: reap it whenever it ends.
	go cmd.Wait()
	var info struct {
		ChildPID int `json:"child-pid"`
	}
	done := make(chan error, 1)
	go func() {
		if err := json.NewDecoder(bufio.NewReader(infoR)).Decode(&info); err != nil {
			done <- err
			return
		}
		line, err := bufio.NewReader(readyR).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("unexpected %q from the sandbox's init", line)
		}
		done <- err
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		cmd.Process.Kill()
		return record{}, fmt.Errorf("bwrap: start sandbox: %w", ctx.Err())
	case <-time.After(30 * time.Second):
		err = errors.New("no sandbox info after 30s")
	}
	if err != nil || info.ChildPID <= 0 {
		cmd.Process.Kill()
		return record{}, fmt.Errorf("bwrap: start sandbox: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	sandboxInit, err := sdk.FindHostProcess(info.ChildPID)
	if err != nil {
		cmd.Process.Kill()
		return record{}, fmt.Errorf("bwrap: start sandbox: %w", err)
	}
	return record{PID: sandboxInit.PID, Start: sandboxInit.StartTime}, nil
}

func (r record) alive() bool {
	return sdk.HostProcess{PID: r.PID, StartTime: r.Start}.Running()
}

// Exec runs script inside the sandbox through nsenter.
// OpenShell implements nohup.ShellTransport: the engine keeps a few shells
// running inside the sandbox and sends them its calls, so a call costs a
// write and a read instead of an nsenter and a new shell. The shell is the
// same nsenter as Exec's, left running with its stdio on pipes; it must
// outlive ctx, so it is not tied to it.
func (s *sandbox) OpenShell(ctx context.Context, script string) (*nohup.Shell, error) {
	if !s.rec.alive() {
		return nil, fmt.Errorf("bwrap: sandbox %s (init pid %d) is gone: %w", s.name, s.rec.PID, env.ErrSandboxGone)
	}
	sh, err := nohup.StartShell(exec.Command("nsenter", "--target", strconv.Itoa(s.rec.PID),
		"--mount", "--uts", "--ipc", "--net", "--pid", "--root", "--wd", "--", "/bin/sh", "-c", script))
	if err != nil {
		return nil, fmt.Errorf("bwrap: shell in sandbox %s: %w", s.name, err)
	}
	return sh, nil
}

func (s *sandbox) Exec(ctx context.Context, script string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if !s.rec.alive() {
		return -1, fmt.Errorf("bwrap: sandbox %s (init pid %d) is gone: %w", s.name, s.rec.PID, env.ErrSandboxGone)
	}
	cmd := exec.CommandContext(ctx, "nsenter", "--target", strconv.Itoa(s.rec.PID),
		"--mount", "--uts", "--ipc", "--net", "--pid", "--root", "--wd", "--", "/bin/sh", "-c", script)
	cmd.Stdin, cmd.Stdout = stdin, stdout
	// To enter the PID namespace, nsenter forks: the script's shell is its
	// child, and outlives it. A call given up (ctx done, as when the engine
	// cuts a follow) must end the shell too, or Wait would hold on to the
	// pipes it keeps open for WaitDelay: nsenter gets a process group of
	// its own, and the whole group is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var errBuf bytes.Buffer
	if stderr != nil {
		cmd.Stderr = io.MultiWriter(stderr, &errBuf)
	} else {
		cmd.Stderr = &errBuf
	}
	// A background command inside can hold the pipes: do not wait for it
	// for ever. Generous, as in env/nohup's local test transport: the
	// engine's start script lets go of them within milliseconds, but a
	// hundred concurrent starts on a loaded machine took over 5 s (CI).
	cmd.WaitDelay = 30 * time.Second
	err := cmd.Run()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) && exitErr.Exited() {
		// nsenter itself fails with 1 and a "nsenter:" message when it
		// cannot enter: the sandbox died under us.
		if !s.rec.alive() {
			return -1, fmt.Errorf("bwrap: sandbox %s is gone: %w", s.name, env.ErrSandboxGone)
		}
		return exitErr.ExitCode(), nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return -1, ctx.Err()
		}
		return -1, fmt.Errorf("bwrap: exec in sandbox %s: %v: %s", s.name, err, strings.TrimSpace(errBuf.String()))
	}
	return 0, nil
}
