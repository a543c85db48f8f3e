package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/shellquote"
	"golang.org/x/sys/unix"
)

// refData is the backend-specific part of a Ref.
type refData struct {
	ID        string `json:"id"`
	Dir       string `json:"dir"`
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
}

// detached is a handle on a process run by a shim.
type detached struct {
	env  *Env
	id   string
	dir  string
	st   shimState
	tree tree

	released atomic.Bool
	// inputCache is the last look of InputWaits.
	inputCache inputCache

	writeMu     sync.Mutex // serialises writes (and their deadlines)
	mu          sync.Mutex // guards stdin
	stdinF      *os.File
	stdinClosed bool
}

func (e *Env) startDetached(ctx context.Context, spec env.Spec) (*detached, error) {
	id := newID()
	dir := filepath.Join(e.stateDir, id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("local: start detached: %w", err)
	}
	if len(spec.Command) > env.InlineCommandMax {
		// Too long for argv (see env.InlineCommandMax): the shim's shell
		// sources it from the process's private directory.
		path := filepath.Join(dir, fileCommand)
		if err := os.WriteFile(path, []byte(spec.Command), 0o600); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("local: start detached: write the command to a file: %w", err)
		}
		spec.Command = ". " + shellquote.Quote(path)
	}
	d, err := e.startOnServer(ctx, id, spec)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("local: start detached: %w", err)
	}
	return d, nil
}

// startOnServer asks the state directory's shim server (started on demand)
// to run the command.
func (e *Env) startOnServer(ctx context.Context, id string, spec env.Spec) (*detached, error) {
	workDir := spec.Dir
	if workDir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		workDir = wd
	}
	workDir, err := filepath.Abs(workDir)
	if err != nil {
		return nil, err
	}
	cfg := shimConfig{Command: spec.Command, Dir: workDir, Env: e.commandEnv(spec), Stdin: spec.Stdin, PTY: spec.PTY, ID: id, SpecTag: spec.Tag, Limits: spec.Limits, Ceiling: e.sys.ceiling}
	if e.sys.cgroupBase != "" {
		cfg.CgroupBase, cfg.CgroupRel = e.sys.cgroupBase, e.sys.cgroupRel
	} else {
		cfg.Tag = treeTagPrefix + id
	}
	rep, hello, err := e.shim.request(ctx, &shimRequest{Op: "start", ID: id, Start: &cfg}, true)
	if err != nil {
		return nil, err
	}
	if rep.Error != "" {
		return nil, fmt.Errorf("shim server %d: %s", hello.PID, rep.Error)
	}
	if rep.State == nil || rep.State.PID <= 0 {
		return nil, fmt.Errorf("shim server %d: no process in its answer", hello.PID)
	}
	return e.newHandle(id, filepath.Join(e.stateDir, id), *rep.State)
}

func readState(dir string) (shimState, error) {
	var st shimState
	data, err := os.ReadFile(filepath.Join(dir, fileState))
	if err != nil {
		return st, err
	}
	// The first line; the exit status may follow.
	data, _, _ = bytes.Cut(data, []byte("\n"))
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("parse %s: %w", fileState, err)
	}
	if st.PID <= 0 || st.ShimPID <= 0 {
		return st, fmt.Errorf("%s: no PID recorded", fileState)
	}
	return st, nil
}

func (e *Env) newHandle(id, dir string, st shimState) (*detached, error) {
	t, err := e.sys.treeFromState(id, &st)
	if err != nil {
		return nil, err
	}
	d := &detached{env: e, id: id, dir: dir, st: st, tree: t}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, env.ErrReleased
	}
	e.handles[d] = struct{}{}
	return d, nil
}

func (e *Env) attach(ref env.Ref) (*detached, error) {
	if ref.Env != e.Name() {
		return nil, fmt.Errorf("local: attach: ref of environment %q: %w", ref.Env, env.ErrNotFound)
	}
	var rd refData
	dec := json.NewDecoder(bytes.NewReader(ref.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rd); err != nil {
		return nil, fmt.Errorf("local: attach: malformed ref data: %w", err)
	}
	if !validID(rd.ID) {
		return nil, fmt.Errorf("local: attach: malformed process id %q in ref", rd.ID)
	}
	// Never trust a path from a Ref: it must name exactly this id's
	// directory inside our own state directory.
	dir := filepath.Join(e.stateDir, rd.ID)
	if rd.Dir != dir {
		return nil, fmt.Errorf("local: attach: ref directory %q is not %q inside the state directory: %w", rd.Dir, dir, env.ErrNotFound)
	}
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("local: attach %s: state directory is gone: %w", rd.ID, env.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("local: attach %s: %w", rd.ID, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("local: attach %s: %s is not a directory: %w", rd.ID, dir, env.ErrNotFound)
	}
	st, err := readState(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("local: attach %s: no recorded state: %w", rd.ID, env.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("local: attach %s: %w", rd.ID, err)
	}
	if st.PID != rd.PID || st.StartTime != rd.StartTime {
		return nil, fmt.Errorf("local: attach %s: ref names pid %d started at %d, state records pid %d started at %d: %w",
			rd.ID, rd.PID, rd.StartTime, st.PID, st.StartTime, env.ErrNotFound)
	}
	d, err := e.newHandle(rd.ID, dir, st)
	if err != nil {
		return nil, fmt.Errorf("local: attach %s: %w", rd.ID, err)
	}
	return d, nil
}

func (d *detached) PID() int { return d.st.PID }

func (d *detached) errorf(op string, err error) error {
	return fmt.Errorf("local: %s %d (%s): %w", op, d.st.PID, d.id, err)
}

// readExit returns the recorded exit status, if the shim wrote it: the
// second line of state.json, or (a process of an earlier per-process
// shim) the exit file.
func (d *detached) readExit() (env.ExitStatus, bool) {
	if d.st.Server == 0 {
		data, err := os.ReadFile(filepath.Join(d.dir, fileExit))
		if err != nil {
			return env.ExitStatus{}, false
		}
		return parseExit(data)
	}
	data, err := os.ReadFile(filepath.Join(d.dir, fileState))
	if err != nil {
		return env.ExitStatus{}, false
	}
	_, rest, ok := bytes.Cut(data, []byte("\n"))
	// Only a whole line counts: the server may be writing it.
	if !ok || len(rest) == 0 || rest[len(rest)-1] != '\n' {
		return env.ExitStatus{}, false
	}
	return parseExit(rest)
}

func parseExit(data []byte) (env.ExitStatus, bool) {
	var st env.ExitStatus
	if err := json.Unmarshal(data, &st); err != nil {
		return env.ExitStatus{}, false
	}
	return st, true
}

// leaderLive and shimAlive report whether the recorded process is still
// running: alive, not a zombie, and the same process, not a PID reused
// since.
func (d *detached) leaderLive() bool { return d.st.leader().Alive() }
func (d *detached) shimAlive() bool  { return d.st.shim().Alive() }

// lost reports a shim that died without recording the exit (killed by
// hand, machine trouble): the status can never be known.
func (d *detached) lost() bool {
	if d.shimAlive() {
		return false
	}
	_, ok := d.readExit()
	return !ok
}

var errLost = errors.New("the shim supervising the process died without recording its exit status")

func (d *detached) Wait(ctx context.Context) (env.ExitStatus, error) {
	if d.released.Load() {
		return env.NoStatus, d.errorf("wait for", env.ErrReleased)
	}
	w := d.env.newDirWatch(d.dir)
	defer w.Close()
	for {
		if st, ok := d.readExit(); ok {
			return st, nil
		}
		if d.lost() {
			return env.NoStatus, d.errorf("wait for", errLost)
		}
		if _, err := w.wait(ctx, nil); err != nil {
			return env.NoStatus, err
		}
	}
}

func (d *detached) Output(ctx context.Context, offset int64) (io.ReadCloser, error) {
	if d.released.Load() {
		return nil, d.errorf("output of", env.ErrReleased)
	}
	if offset < 0 {
		return nil, d.errorf("output of", fmt.Errorf("negative offset %d", offset))
	}
	f, err := os.Open(filepath.Join(d.dir, fileLog))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, d.errorf("output of", env.ErrNotFound)
	}
	if err != nil {
		return nil, d.errorf("output of", err)
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		_ = f.Close()
		return nil, d.errorf("output of", err)
	}
	s := &logStream{d: d, f: f, ctx: ctx, w: d.env.newDirWatch(d.dir), closed: make(chan struct{}), pos: offset}
	s.punched = alignUp(d.env.logHead, punchAlign)
	return s, nil
}

// logStream follows a detached process's log file until the exit is
// recorded and the log is read to its end. It keeps the log on disk
// bounded (Options.LogMax): see punch.
type logStream struct {
	d         *detached
	f         *os.File
	ctx       context.Context
	w         *dirWatch
	closed    chan struct{}
	closeOnce sync.Once

	pos     int64 // the log offset of the next byte read
	punched int64 // the log is a hole up to here from the head's end
	// wfMu guards wf and noPunch against Close, which may run during a
	// Read.
	wfMu    sync.Mutex
	wf      *os.File // the log opened for writing, to punch; nil until needed
	noPunch bool     // punching failed (a filesystem without holes), or closed
}

// punchAlign is the block size holes are aligned to: a partial block is
// only zeroed, not freed.
const punchAlign = 4096

// punchStep is the least a punch frees: one fallocate per MiB of output
// at most.
const punchStep = 1 << 20

func alignUp(n, a int64) int64   { return (n + a - 1) / a * a }
func alignDown(n, a int64) int64 { return n / a * a }

// punch drops the middle of the log that this stream has delivered: from
// the end of the head (Env.logHead) to logTail bytes before the read
// position, by punching a hole (the size and every offset stay; the hole
// reads as zeros), after recording the range in the file omitted (see
// env.LogKeep). Only bytes already read are dropped, so this stream never
// reads the hole. A failure (a filesystem without holes) turns punching
// off for the stream, logged once.
func (s *logStream) punch() {
	e := s.d.env
	end := alignDown(s.pos-e.logTail, punchAlign)
	if e.logTail == 0 || end-s.punched < punchStep {
		return
	}
	s.wfMu.Lock()
	defer s.wfMu.Unlock()
	if s.noPunch {
		return
	}
	if s.wf == nil {
		wf, err := os.OpenFile(s.f.Name(), os.O_WRONLY, 0)
		if err != nil {
			s.punchFailed(err)
			return
		}
		s.wf = wf
	}
	start := alignUp(e.logHead, punchAlign)
	rec := fmt.Sprintf("%d %d\n", start, end)
	if err := os.WriteFile(filepath.Join(s.d.dir, fileOmitted), []byte(rec), 0o600); err != nil {
		s.punchFailed(err)
		return
	}
	if err := unix.Fallocate(int(s.wf.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, s.punched, end-s.punched); err != nil {
		s.punchFailed(err)
		return
	}
	s.punched = end
}

// punchFailed turns punching off; the caller holds wfMu.
func (s *logStream) punchFailed(err error) {
	s.noPunch = true
	s.d.env.log.Debug("log on disk not bounded: cannot punch a hole in it", "dir", s.d.dir, "err", err)
}

func (s *logStream) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	exited, changed := false, false
	for {
		select {
		case <-s.closed:
			return 0, os.ErrClosed
		default:
		}
		n, err := s.f.Read(p)
		if n > 0 {
			s.w.activity()
			s.pos += int64(n)
			s.punch()
			return n, nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if exited {
			// The exit was recorded before this read found the end:
			// everything the command wrote is read.
			return 0, io.EOF
		}
		// At the end of what is written. Once the exit is recorded, read
		// once more (output written before the record is then certainly
		// in the file) and end.
		if _, exited = s.d.readExit(); exited {
			continue
		}
		// A dead shim server announces nothing: look after a quiet spell
		// (the wait's bound), not on every change while output flows.
		if !changed && s.d.lost() {
			exited = true
			continue
		}
		if changed, err = s.w.wait(s.ctx, s.closed); err != nil {
			return 0, err
		}
	}
}

func (s *logStream) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	_ = s.w.Close()
	s.wfMu.Lock()
	s.noPunch = true
	if s.wf != nil {
		_ = s.wf.Close()
	}
	s.wfMu.Unlock()
	return s.f.Close()
}

func (d *detached) Write(ctx context.Context, p []byte) (int, error) {
	if d.released.Load() {
		return 0, d.errorf("write to", env.ErrReleased)
	}
	if !d.st.Stdin {
		return 0, d.errorf("write to", fmt.Errorf("spec did not ask for stdin: %w", env.ErrStdinClosed))
	}
	d.writeMu.Lock()
	defer d.writeMu.Unlock()
	d.mu.Lock()
	if d.stdinClosed || fileExists(filepath.Join(d.dir, fileStdinClosed)) {
		d.mu.Unlock()
		return 0, d.errorf("write to", env.ErrStdinClosed)
	}
	if _, ok := d.readExit(); ok {
		d.mu.Unlock()
		return 0, d.errorf("write to", env.ErrExited)
	}
	if d.stdinF == nil {
		fifo := filepath.Join(d.dir, fileStdin)
		// Non-blocking open: with no reader left (the command and all its
		// descendants are gone) it fails with ENXIO instead of hanging.
		fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			d.mu.Unlock()
			if errors.Is(err, unix.ENXIO) {
				return 0, d.errorf("write to", env.ErrExited)
			}
			return 0, d.errorf("write to", err)
		}
		d.stdinF = os.NewFile(uintptr(fd), fifo)
	}
	f := d.stdinF
	d.mu.Unlock()
	n, err := writeCtx(ctx, f, p)
	if err != nil {
		d.mu.Lock()
		closed := d.stdinClosed
		d.mu.Unlock()
		switch {
		case errors.Is(err, syscall.EPIPE):
			return n, d.errorf("write to", env.ErrExited)
		case closed:
			return n, d.errorf("write to", env.ErrStdinClosed)
		case ctx.Err() != nil:
			return n, ctx.Err()
		}
		if _, ok := d.readExit(); ok {
			return n, d.errorf("write to", env.ErrExited)
		}
		return n, d.errorf("write to", err)
	}
	return n, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func (d *detached) CloseStdin(ctx context.Context) error {
	if d.released.Load() {
		return d.errorf("close stdin of", env.ErrReleased)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.st.Stdin || d.stdinClosed {
		d.stdinClosed = true
		return nil
	}
	d.stdinClosed = true
	if d.stdinF != nil {
		_ = d.stdinF.Close()
		d.stdinF = nil
	}
	// The marker tells the shim (and any other supervisor) that stdin is
	// closed for good; the shim then drops its end of the FIFO.
	f, err := os.OpenFile(filepath.Join(d.dir, fileStdinClosed), os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return d.errorf("close stdin of", err)
	}
	return f.Close()
}

func (d *detached) Signal(ctx context.Context, sig env.Signal) error {
	if d.released.Load() {
		return d.errorf("signal", env.ErrReleased)
	}
	num, err := sysSignal(sig)
	if err != nil {
		return d.errorf("signal", err)
	}
	_, exited := d.readExit()
	if exited || !d.leaderLive() {
		_ = d.tree.signal(num, false)
		return d.errorf("signal "+string(sig)+" to", env.ErrExited)
	}
	if err := d.tree.signal(num, true); err != nil {
		return d.errorf("signal "+string(sig)+" to", err)
	}
	return nil
}

func (d *detached) Survivors(ctx context.Context) ([]int, error) {
	if d.released.Load() {
		return nil, d.errorf("survivors of", env.ErrReleased)
	}
	pids, err := d.tree.survivors(d.leaderLive())
	if err != nil {
		return nil, d.errorf("survivors of", err)
	}
	return pids, nil
}

// Resize asks the shim server holding the terminal to resize it. With
// the exit recorded it returns env.ErrExited; with the server gone (the
// terminal went with it) the error names the shim, as Wait's does.
func (d *detached) Resize(ctx context.Context, size env.WindowSize) error {
	if d.released.Load() {
		return d.errorf("resize", env.ErrReleased)
	}
	if !d.st.PTY {
		return d.errorf("resize", fmt.Errorf("no PTY: %w", env.ErrUnsupported))
	}
	if _, exited := d.readExit(); exited {
		return d.errorf("resize", env.ErrExited)
	}
	// Never start a server for this: only the one running the process
	// holds its terminal.
	rep, hello, err := d.env.shim.request(ctx, &shimRequest{Op: "resize", ID: d.id, Size: &size}, false)
	switch {
	case err != nil && !d.shimAlive():
		return d.errorf("resize", errLost)
	case err != nil:
		return d.errorf("resize", err)
	case hello.PID != d.st.ShimPID || hello.StartTime != d.st.ShimStart:
		// Another server (of another protocol version) runs it.
		return d.errorf("resize", fmt.Errorf("the process runs under shim server %d, which this supervisor cannot reach: %w", d.st.ShimPID, env.ErrUnsupported))
	case rep.Gone:
		if _, exited := d.readExit(); exited || !d.leaderLive() {
			return d.errorf("resize", env.ErrExited)
		}
		return d.errorf("resize", errors.New("the shim server no longer holds the terminal"))
	case rep.Error != "":
		return d.errorf("resize", errors.New(rep.Error))
	}
	return nil
}

func (d *detached) Ref() (env.Ref, error) {
	if d.released.Load() {
		return env.Ref{}, d.errorf("ref of", env.ErrReleased)
	}
	data, err := json.Marshal(refData{ID: d.id, Dir: d.dir, PID: d.st.PID, StartTime: d.st.StartTime})
	if err != nil {
		return env.Ref{}, d.errorf("ref of", err)
	}
	return env.Ref{Env: d.env.Name(), PID: d.st.PID, Data: data}, nil
}

// Release closes the handle's stdin descriptor; the process, its shim and
// its directory stay.
func (d *detached) Release() error {
	if !d.released.CompareAndSwap(false, true) {
		return nil
	}
	d.mu.Lock()
	if d.stdinF != nil {
		_ = d.stdinF.Close()
		d.stdinF = nil
	}
	d.mu.Unlock()
	d.inputCache.close()
	d.tree.release()
	d.env.forgetHandle(d)
	return nil
}

// Remove deletes the process directory. It refuses while the command runs
// (or while its fate is unknown because the shim is still alive without a
// recorded exit).
func (d *detached) Remove(ctx context.Context) error {
	if d.released.Load() {
		return d.errorf("remove", env.ErrReleased)
	}
	if _, exited := d.readExit(); !exited && (d.leaderLive() || d.shimAlive()) {
		return d.errorf("remove", errors.New("process is still running; kill it first"))
	}
	_ = d.Release()
	d.tree.cleanup()
	d.env.sys.removeLimits(d.id)
	if !strings.HasPrefix(d.dir, d.env.stateDir+string(filepath.Separator)) {
		return d.errorf("remove", fmt.Errorf("directory %q is outside the state directory", d.dir))
	}
	if err := os.RemoveAll(d.dir); err != nil {
		return d.errorf("remove", err)
	}
	return nil
}

func (e *Env) forgetHandle(d *detached) {
	e.mu.Lock()
	delete(e.handles, d)
	e.mu.Unlock()
}

func validID(id string) bool {
	if len(id) != 16 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// treeTagPrefix starts the name of the variable that marks a process tree
// in pgroup+scan mode. A per-tree name (not a per-tree value) lets nested
// supervisors each find their own tree: a descendant carries all the tags.
const treeTagPrefix = "CORRAL_TREE_"

// shimExecutable is the binary to re-execute as the shim: /proc/self/exe,
// which names the running binary even after the file on disk was replaced
// (an upgrade while the supervisor runs), else os.Executable.
func shimExecutable() (string, error) {
	const self = "/proc/self/exe"
	if _, err := os.Stat(self); err == nil {
		return self, nil
	}
	return os.Executable()
}
