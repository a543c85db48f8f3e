package local

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/procstat"
	"golang.org/x/sys/unix"
)

// system is what New found out about the machine.
type system struct {
	// cgroupBase is <cgroup2 mount><own cgroup>/corral, where every process
	// gets its own cgroup; empty when cgroups are not used.
	cgroupBase string
	// cgroupRoot is the cgroup2 mount point (to validate recorded paths).
	cgroupRoot string
	// cgroupRel is cgroupBase relative to the mount, as /proc/PID/cgroup
	// shows it ("/corral" on a host whose supervisor sits in the root).
	cgroupRel string
	// limits is what the host lets corral enforce of env.Limits.
	limits *limitSupport
	// ceiling names the v1 cgroup (ceilingName) under corral's per
	// controller base that holds every process's limit cgroups; "" for
	// none (see Options.Ceiling).
	ceiling string
	// ceilingLimits are the ceiling's limits, for Capabilities' notes.
	ceilingLimits env.Limits

	// pending are the limit cgroups of processes not removed yet.
	pendingMu sync.Mutex
	pending   map[*limitGroups]struct{}
}

func newSystem(disableCgroup bool, log *slog.Logger) (*system, error) {
	if disableCgroup {
		// Detached processes started by another supervisor may still run
		// in cgroups: knowing the mount lets Attach signal them.
		mount, _, _ := cgroup2Mount()
		return &system{cgroupRoot: mount, limits: hostLimits("")}, nil
	}
	root, rel, err := findCgroup()
	if err != nil {
		log.Info("cgroup v2 not usable; tree kill falls back to process group + scan", "reason", err)
		return &system{limits: hostLimits("")}, nil
	}
	base := filepath.Join(root, rel)
	return &system{cgroupBase: base, cgroupRoot: root, cgroupRel: rel, limits: hostLimits(base)}, nil
}

// findCgroup locates a writable cgroup2 hierarchy with cgroup.kill and
// prepares the corral sub-tree under the supervisor's own cgroup.
func findCgroup() (mount, rel string, err error) {
	mount, mountRoot, err := cgroup2Mount()
	if err != nil {
		return "", "", err
	}
	own, err := ownCgroup()
	if err != nil {
		return "", "", err
	}
	// Inside a cgroup namespace or a bind mount the mount's root may be a
	// sub-tree: our path must lie under it.
	if mountRoot != "/" {
		if own != mountRoot && !strings.HasPrefix(own, mountRoot+"/") {
			return "", "", fmt.Errorf("own cgroup %s is outside the mounted sub-tree %s", own, mountRoot)
		}
		own = strings.TrimPrefix(own, mountRoot)
		if own == "" {
			own = "/"
		}
	}
	ownDir := filepath.Join(mount, own)
	if err := unix.Access(filepath.Join(ownDir, "cgroup.procs"), unix.W_OK); err != nil {
		return "", "", fmt.Errorf("own cgroup %s is not writable: %w", ownDir, err)
	}
	base := filepath.Join(ownDir, "corral")
	if err := os.Mkdir(base, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", "", fmt.Errorf("create %s: %w", base, err)
	}
	sweepStaleCgroups(base)
	probe := filepath.Join(base, "probe-"+newID())
	if err := os.Mkdir(probe, 0o755); err != nil {
		return "", "", fmt.Errorf("create %s: %w", probe, err)
	}
	defer os.Remove(probe)
	if _, err := os.Stat(filepath.Join(probe, "cgroup.kill")); err != nil {
		return "", "", fmt.Errorf("no cgroup.kill (kernel older than 5.14?): %w", err)
	}
	return mount, filepath.Join(own, "corral"), nil
}

// staleCgroupAge is how old an empty process cgroup must be before New
// removes it. A cgroup is empty between its creation and the start of its
// process only for microseconds; one that is empty after a minute belongs
// to a tree that ended while nobody was left to remove it (its members
// outlived the leader and every handle).
const staleCgroupAge = time.Minute

// sweepStaleCgroups removes empty, stale process cgroups under base.
// Removing an empty cgroup affects no process, and the kernel refuses to
// remove a populated one.
func sweepStaleCgroups(base string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !(validID(name) || strings.HasPrefix(name, "probe-")) {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > staleCgroupAge {
			_ = os.Remove(filepath.Join(base, name))
		}
	}
}

func cgroup2Mount() (mount, root string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		if fields := strings.Fields(post); len(fields) == 0 || fields[0] != "cgroup2" {
			continue
		}
		fields := strings.Fields(pre)
		if len(fields) < 5 {
			continue
		}
		return unescapeMount(fields[4]), unescapeMount(fields[3]), nil
	}
	if err := sc.Err(); err != nil {
		return "", "", err
	}
	return "", "", errors.New("no cgroup2 file system mounted")
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func ownCgroup() (string, error) { return procCgroup("self") }

// procCgroup returns the cgroup v2 path ("0::PATH") of a process.
func procCgroup(pid string) (string, error) {
	data, err := os.ReadFile("/proc/" + pid + "/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, nil
		}
	}
	return "", errors.New("no cgroup v2 entry in /proc/" + pid + "/cgroup")
}

func (s *system) capabilities() env.Capabilities {
	c := env.Capabilities{
		PTY: true, Resize: true, Stdin: true, Reattach: true,
		ReattachPTY: true, ReplayOutput: false,
		Ports: true, CheckURL: true, InputWait: true,
		Notes: []string{
			"output of non-detached processes is a live stream: it can be opened once (ReplayOutput applies to detached processes only)",
			"detached processes run under one shim server per state directory, which holds their terminals",
			fmt.Sprintf("after a process exits, output from descendants still holding its output is collected for %s", OutputGrace),
		},
	}
	if s.limits != nil {
		c.Limits, c.LimitsNote = s.limits.names, s.limits.note
	}
	if s.ceiling != "" {
		c.Notes = append(c.Notes, "every process runs under one ceiling of "+s.ceilingLimits.String()+" (cgroup "+s.ceiling+")")
	}
	if s.cgroupBase != "" {
		c.TreeKill = "cgroup"
		c.Notes = append(c.Notes, "each process runs in its own cgroup under "+s.cgroupBase+"; SIGKILL uses cgroup.kill")
	} else {
		c.TreeKill = "pgroup+scan"
		c.Notes = append(c.Notes, "no usable cgroup v2: trees are found by process group and an inherited environment tag; a process that leaves the group and clears its environment escapes")
	}
	return c
}

func (s *system) newTree(id string) (tree, error) {
	if s.cgroupBase != "" {
		return &cgroupTree{dir: filepath.Join(s.cgroupBase, id), rel: filepath.Join(s.cgroupRel, id), fd: -1}, nil
	}
	return &scanTree{tag: treeTagPrefix + id}, nil
}

// treeFromState rebuilds the tree of a detached process from its recorded
// state, refusing a cgroup outside the corral sub-tree.
//
// The cgroup is checked by shape (.../corral/<id>), not against this
// supervisor's own cgroup: a supervisor restarted elsewhere (another
// systemd scope, another shell) must still reach the processes.
func (s *system) treeFromState(id string, st *shimState) (tree, error) {
	if st.Cgroup != "" {
		if s.cgroupRoot == "" {
			return nil, fmt.Errorf("process runs in cgroup %s but no cgroup2 file system is mounted here", st.Cgroup)
		}
		if !filepath.IsAbs(st.Cgroup) || filepath.Clean(st.Cgroup) != st.Cgroup ||
			filepath.Base(st.Cgroup) != id || filepath.Base(filepath.Dir(st.Cgroup)) != "corral" {
			return nil, fmt.Errorf("recorded cgroup %q is not .../corral/%s", st.Cgroup, id)
		}
		return &cgroupTree{dir: filepath.Join(s.cgroupRoot, st.Cgroup), rel: st.Cgroup, fd: -1}, nil
	}
	if st.Tag != treeTagPrefix+id {
		return nil, fmt.Errorf("recorded tree tag %q is not %s%s", st.Tag, treeTagPrefix, id)
	}
	return &scanTree{tag: st.Tag, pgid: st.PID}, nil
}

// cgroupTree is a cgroup of its own for one process tree.
type cgroupTree struct {
	dir string // absolute path in the cgroup2 mount
	rel string // as /proc/PID/cgroup shows it
	fd  int
}

func (t *cgroupTree) prepare(cmd *exec.Cmd) error {
	if err := os.Mkdir(t.dir, 0o755); err != nil {
		return fmt.Errorf("create cgroup: %w", err)
	}
	fd, err := unix.Open(t.dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(t.dir)
		return fmt.Errorf("open cgroup: %w", err)
	}
	t.fd = fd
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = fd
	return nil
}

func (t *cgroupTree) started(*os.Process) error {
	t.release()
	return nil
}

func (t *cgroupTree) abort() {
	t.release()
	_ = os.Remove(t.dir)
}

func (t *cgroupTree) release() {
	if t.fd >= 0 {
		_ = unix.Close(t.fd)
		t.fd = -1
	}
}

func (t *cgroupTree) signal(sig syscall.Signal, _ bool) error {
	if sig == syscall.SIGKILL {
		err := os.WriteFile(filepath.Join(t.dir, "cgroup.kill"), []byte("1"), 0)
		if cgroupGone(err) {
			return nil // removed: nothing left in it
		}
		return err
	}
	pids, err := t.procs()
	if err != nil {
		return err
	}
	var errs []error
	for _, pid := range pids {
		if err := signalVerified(pid, sig, func() bool { return t.contains(pid) }); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (t *cgroupTree) contains(pid int) bool {
	cg, err := procCgroup(strconv.Itoa(pid))
	return err == nil && cg == t.rel
}

func (t *cgroupTree) procs() ([]int, error) {
	data, err := os.ReadFile(filepath.Join(t.dir, "cgroup.procs"))
	if cgroupGone(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// cgroupGone reports an error that means the cgroup was removed: ENOENT,
// or ENODEV for a file opened while its cgroup was being removed.
func cgroupGone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV)
}

func (t *cgroupTree) survivors(bool) ([]int, error) {
	pids, err := t.procs()
	if err != nil {
		return nil, err
	}
	if len(pids) == 0 {
		// Nothing left: a tree that outlived its leader's cleanup is
		// removed by whoever sees it empty first.
		t.cleanup()
		return nil, nil
	}
	live := pids[:0]
	for _, pid := range pids {
		if st, err := procstat.Read(pid); err == nil && !st.Exited() {
			live = append(live, pid)
		}
	}
	return live, nil
}

func (t *cgroupTree) cleanup() bool {
	err := os.Remove(t.dir)
	return err == nil || errors.Is(err, fs.ErrNotExist)
}

// scanTree is a process group plus every process carrying the tag
// variable in its environment.
type scanTree struct {
	tag  string
	pgid int
}

func (t *scanTree) prepare(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
	cmd.Env = append(cmd.Env, t.tag+"=1")
	return nil
}

func (t *scanTree) started(p *os.Process) error { t.pgid = p.Pid; return nil }
func (t *scanTree) abort()                      {}
func (t *scanTree) release()                    {}
func (t *scanTree) cleanup() bool               { return true }

// member is one process found by a scan.
type member struct {
	pid    int
	pgid   int
	tagged bool
}

// scan lists live processes that carry the tag or sit in the group. Group
// members count only when the group is known to be ours: the leader is
// live, or a tagged process is in it (a group whose every member died can
// have its number reused by a stranger).
func (t *scanTree) scan(leaderLive bool) ([]member, bool, error) {
	found, groupOurs, err := scanTrees([]*scanTree{t}, []bool{leaderLive})
	if err != nil {
		return nil, false, err
	}
	return found[0], groupOurs[0], nil
}

// scanTrees is scan for several trees in one pass over /proc: each
// process's stat and environment are read once, whatever the number of
// trees (TreeStats measures every tree at once).
func scanTrees(ts []*scanTree, leaderLive []bool) ([][]member, []bool, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, nil, err
	}
	self := os.Getpid()
	needles := make([][]byte, len(ts))
	for k, t := range ts {
		needles[k] = []byte(t.tag + "=")
	}
	found := make([][]member, len(ts))
	groupOurs := slices.Clone(leaderLive)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		st, err := procstat.Read(pid)
		if err != nil || st.Exited() {
			continue
		}
		environ, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		for k, t := range ts {
			tagged := environHas(environ, needles[k])
			if !tagged && (t.pgid == 0 || st.PGID != t.pgid) {
				continue
			}
			if tagged && st.PGID == t.pgid {
				groupOurs[k] = true
			}
			found[k] = append(found[k], member{pid: pid, pgid: st.PGID, tagged: tagged})
		}
	}
	for k := range found {
		if groupOurs[k] {
			continue
		}
		kept := found[k][:0]
		for _, m := range found[k] {
			if m.tagged {
				kept = append(kept, m)
			}
		}
		found[k] = kept
	}
	return found, groupOurs, nil
}

func (t *scanTree) signal(sig syscall.Signal, leaderLive bool) error {
	members, groupOurs, err := t.scan(leaderLive)
	if err != nil {
		return err
	}
	var errs []error
	if groupOurs && t.pgid > 0 {
		if err := unix.Kill(-t.pgid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("kill group %d: %w", t.pgid, err))
		}
	}
	needle := []byte(t.tag + "=")
	for _, m := range members {
		if groupOurs && m.pgid == t.pgid {
			continue // reached by the group signal
		}
		if !m.tagged {
			continue
		}
		pid := m.pid
		if err := signalVerified(pid, sig, func() bool { return hasEnvVar(pid, needle) }); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (t *scanTree) survivors(leaderLive bool) ([]int, error) {
	members, _, err := t.scan(leaderLive)
	if err != nil {
		return nil, err
	}
	pids := make([]int, 0, len(members))
	for _, m := range members {
		pids = append(pids, m.pid)
	}
	return pids, nil
}

// hasEnvVar reports whether /proc/PID/environ has an entry starting with
// needle ("NAME=").
func hasEnvVar(pid int, needle []byte) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	return err == nil && environHas(data, needle)
}

// environHas reports whether an environ block (NUL-separated entries) has
// an entry starting with needle ("NAME=").
func environHas(data, needle []byte) bool {
	if bytes.HasPrefix(data, needle) {
		return true
	}
	return bytes.Contains(data, append([]byte{0}, needle...))
}

// signalVerified signals pid only if stillOurs holds for it. The PID is
// pinned with a pidfd first, so the check and the signal are about the same
// process even if the PID is reused meanwhile.
func signalVerified(pid int, sig syscall.Signal, stillOurs func() bool) error {
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		return nil
	case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EINVAL):
		// Kernel older than 5.3: check and kill with the narrowest window.
		if !stillOurs() {
			return nil
		}
		if err := unix.Kill(pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("kill %d: %w", pid, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(fd)
	if !stillOurs() {
		return nil
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal %d: %w", pid, err)
	}
	return nil
}

// waitNoReap blocks until p has exited, leaving it a zombie so its PID
// stays reserved until the caller reaps it.
func waitNoReap(p *os.Process) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, p.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}
