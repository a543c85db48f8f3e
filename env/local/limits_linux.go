package local

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/env"
)

// Limits (env.Limits) are enforced by cgroup controllers: memory, pids and
// cpu. Where the process's own cgroup v2 (cgroupTree) has them, the
// limits are written there before the fork, which places the command in
// it (CLONE_INTO_CGROUP). Where v2 lacks them but the host mounts v1
// hierarchies with them (this project's CI machine: v1 controllers beside
// an empty cgroup2 mount), each process also gets a v1 cgroup per
// controller, under the supervisor's own: the fork is made by a thread
// moved into those cgroups first (v1 places threads, and a child starts
// in its forking thread's cgroups), and that thread ends with the fork:
// it never serves other goroutines. Memory is limited with swap
// (memsw/swap.max), so the limit ends in an OOM kill, never in swapping.

// limitControllers maps each limit to its cgroup controller.
var limitControllers = []struct{ limit, controller string }{
	{env.LimitMemory, "memory"}, {env.LimitCPUs, "cpu"}, {env.LimitPids, "pids"},
}

// limitSupport is what this host lets corral enforce, found once.
type limitSupport struct {
	// v2: controllers enabled for the per-process v2 cgroups.
	v2 map[string]bool
	// v1: controller → the directory holding corral's per-process v1
	// cgroups (<mount><our cgroup>/corral).
	v1 map[string]string
	// names are the limits enforced (env.Capabilities.Limits); note says
	// why the others are not.
	names []string
	note  string

	mu   sync.Mutex
	made map[string]bool // v1 bases made (ensureBase)
}

var (
	limitsMu    sync.Mutex
	limitsFound = map[string]*limitSupport{}
)

// hostLimits finds, once per process and v2 sub-tree, what this host
// enforces; v2base is corral's v2 sub-tree ("" without one).
func hostLimits(v2base string) *limitSupport {
	limitsMu.Lock()
	defer limitsMu.Unlock()
	ls, ok := limitsFound[v2base]
	if !ok {
		ls = findLimits(v2base)
		limitsFound[v2base] = ls
	}
	return ls
}

// newLimitGroups writes the limits of process id (see limitSupport.create).
func (s *system) newLimitGroups(id, v2dir string, l *env.Limits) (*limitGroups, error) {
	if (l == nil || l.IsZero()) && s.ceiling == "" {
		return nil, nil
	}
	if s.limits == nil {
		if l == nil || l.IsZero() {
			return nil, nil
		}
		return nil, env.CheckLimits("local", env.Capabilities{}, *l)
	}
	g, err := s.limits.create(id, v2dir, l, s.ceiling)
	if err != nil || len(g.v1) == 0 {
		return g, err
	}
	g.sys = s
	s.pendingMu.Lock()
	if s.pending == nil {
		s.pending = map[*limitGroups]struct{}{}
	}
	s.pending[g] = struct{}{}
	s.pendingMu.Unlock()
	return g, nil
}

// removePending removes the limit cgroups of this supervisor's processes
// that are still there (a tree that ended while its removal was pending),
// at Close: nobody else would before the next supervisor's sweep.
func (s *system) removePending() {
	s.pendingMu.Lock()
	pending := make([]*limitGroups, 0, len(s.pending))
	for g := range s.pending {
		pending = append(pending, g)
	}
	s.pendingMu.Unlock()
	for _, g := range pending {
		g.remove()
	}
}

// removeLimits deletes the v1 cgroups of process id, if any.
func (s *system) removeLimits(id string) { s.limits.removeFor(id, s.ceiling) }

// ceilingName names the ceiling cgroup of the supervisor whose state
// directory is stateDir: one per state directory, so supervisors that
// share a cgroup (tests, a daemon and a CLI) keep their own ceilings, and
// a restarted daemon finds its own again.
func ceilingName(stateDir string) string {
	sum := sha256.Sum256([]byte(stateDir))
	return "ceiling-" + hex.EncodeToString(sum[:8])
}

var ceilingPattern = regexp.MustCompile(`^ceiling-[0-9a-f]{16}$`)

func validCeiling(name string) bool { return ceilingPattern.MatchString(name) }

// setCeiling puts every process this supervisor starts from now on under
// one cgroup per controller limited to l: in v1, a ceiling cgroup under
// corral's base that holds the processes' own cgroups; in v2, corral's
// sub-tree itself, which holds them already. Limits of an earlier ceiling
// of the same name that l does not set are lifted.
func (s *system) setCeiling(stateDir string, l env.Limits) error {
	ls := s.limits
	if ls == nil {
		return env.CheckLimits("local", env.Capabilities{}, l)
	}
	if err := env.CheckLimits("local", env.Capabilities{Limits: ls.names, LimitsNote: ls.note}, l); err != nil {
		return err
	}
	name := ceilingName(stateDir)
	for _, lc := range limitControllers {
		if ls.v2[lc.controller] && s.cgroupBase != "" {
			if err := writeLimitFiles(s.cgroupBase, limitFilesV2(lc.controller, &l)); err != nil {
				return err
			}
			continue
		}
		base := ls.v1[lc.controller]
		if base == "" {
			continue
		}
		if err := ls.ensureBase(base); err != nil {
			return err
		}
		dir := filepath.Join(base, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create %s: %w", dir, unwrapPath(err))
		}
		// Lifted first, so that a new limit is never refused for being
		// above an old one (memory under memory+swap).
		if err := writeLimitFiles(dir, append(unlimitedFiles(lc.controller), limitFiles(lc.controller, &l)...)); err != nil {
			return err
		}
		sweepStaleCgroups(dir)
		s.ceiling, s.ceilingLimits = name, l
	}
	return nil
}

// dropCeiling removes the ceiling's cgroups, and with them the empty
// cgroups of processes that ended in them; populated ones stay. The
// kernel lets a cgroup go a moment after its last member was reaped, so
// it looks again for a bounded while.
func (s *system) dropCeiling() {
	s.removePending()
	if s.ceiling == "" || s.limits == nil {
		return
	}
	deadline := time.Now().Add(cgroupRemoveWait)
	for _, base := range s.limits.v1 {
		dir := filepath.Join(base, s.ceiling)
		if subs, err := os.ReadDir(dir); err == nil {
			for _, sub := range subs {
				if sub.IsDir() && validID(sub.Name()) {
					removeCgroup(filepath.Join(dir, sub.Name()), deadline)
				}
			}
		}
		removeCgroup(dir, deadline)
	}
}

// unlimitedFiles lift a v1 controller's limit (an earlier ceiling's),
// memory+swap first: it may never be below memory alone.
func unlimitedFiles(controller string) []limitFile {
	switch controller {
	case "memory":
		return []limitFile{{"memory.memsw.limit_in_bytes", "-1", true}, {"memory.limit_in_bytes", "-1", false}}
	case "cpu":
		return []limitFile{{"cpu.cfs_quota_us", "-1", false}}
	case "pids":
		return []limitFile{{"pids.max", "max", false}}
	}
	return nil
}

func findLimits(v2base string) *limitSupport {
	ls := &limitSupport{v2: map[string]bool{}, v1: map[string]string{}, made: map[string]bool{}}
	var why []string
	if v2base != "" {
		ls.enableV2(v2base)
	}
	mountinfo, _ := os.ReadFile("/proc/self/mountinfo")
	procCgroup, _ := os.ReadFile("/proc/self/cgroup")
	_, _, mounts := cgroupMounts(mountinfo)
	_, own := procCgroups(procCgroup)
	for _, lc := range limitControllers {
		if ls.v2[lc.controller] {
			ls.names = append(ls.names, lc.limit)
			continue
		}
		m, path := mounts[lc.controller], own[lc.controller]
		dir := ""
		if m.mount != "" && path != "" {
			dir = underMount(m.mount, m.root, path)
		}
		if dir == "" {
			why = append(why, fmt.Sprintf("--%s needs the %s controller in a writable cgroup (v2 delegated to corral, or v1), and this host offers neither", lc.limit, lc.controller))
			continue
		}
		// The base is made at the first limited start (ensureBase), not
		// here: a supervisor that limits nothing leaves nothing behind in
		// its cgroup, which its owner may want to remove.
		if err := unix.Access(dir, unix.W_OK); err != nil {
			why = append(why, fmt.Sprintf("--%s: %s is not writable; run the supervisor as root or in a delegated cgroup", lc.limit, dir))
			continue
		}
		ls.v1[lc.controller] = filepath.Join(dir, "corral")
		ls.names = append(ls.names, lc.limit)
	}
	ls.note = strings.Join(why, "; ")
	return ls
}

// ensureBase makes corral's base cgroup of a v1 hierarchy, once, and
// removes the stale, empty process cgroups an earlier supervisor left in
// it.
func (ls *limitSupport) ensureBase(base string) error {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.made[base] {
		return nil
	}
	if err := os.Mkdir(base, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create %s: %w", base, unwrapPath(err))
	}
	sweepStaleCgroups(base)
	ls.made[base] = true
	return nil
}

// enableV2 enables in corral's v2 sub-tree the controllers its parent
// offers; what the kernel refuses (a controller bound to a v1 hierarchy,
// a parent that does not delegate it) stays off.
func (ls *limitSupport) enableV2(base string) {
	data, err := os.ReadFile(filepath.Join(base, "cgroup.controllers"))
	if err != nil {
		return
	}
	offered := strings.Fields(string(data))
	for _, lc := range limitControllers {
		if !slices.Contains(offered, lc.controller) {
			continue
		}
		_ = os.WriteFile(filepath.Join(base, "cgroup.subtree_control"), []byte("+"+lc.controller), 0)
	}
	data, err = os.ReadFile(filepath.Join(base, "cgroup.subtree_control"))
	if err != nil {
		return
	}
	for _, c := range strings.Fields(string(data)) {
		ls.v2[c] = true
	}
}

// limitGroups are the cgroups one process's limits were written to.
type limitGroups struct {
	v1  []string // per-process v1 cgroups the fork joins
	oom string   // the kernel's OOM record for the limited memory; "" for none
	// sys tracks the groups of its processes until they are removed
	// (removePending); nil for the shim server's, which it removes itself.
	sys *system
}

// create writes l for process id: into v2dir (the process's own v2
// cgroup, made already; "" without one) for the controllers v2 has, into
// new v1 cgroups for the others. On error nothing is left behind.
//
// Under a ceiling (the name of the supervisor's ceiling cgroup), every
// process gets a v1 cgroup per controller, limited or not, inside the
// ceiling's.
func (ls *limitSupport) create(id, v2dir string, l *env.Limits, ceiling string) (*limitGroups, error) {
	g := &limitGroups{}
	if l == nil {
		l = &env.Limits{}
	}
	if l.IsZero() && ceiling == "" {
		return g, nil
	}
	if err := env.CheckLimits("local", env.Capabilities{Limits: ls.names, LimitsNote: ls.note}, *l); err != nil {
		return nil, err
	}
	if !validID(id) {
		return nil, fmt.Errorf("limits: malformed process id %q", id)
	}
	fail := func(err error) (*limitGroups, error) {
		g.remove()
		return nil, fmt.Errorf("limits: %w", err)
	}
	for _, lc := range limitControllers {
		files := limitFiles(lc.controller, l)
		v2 := ls.v2[lc.controller] && v2dir != ""
		if len(files) == 0 && (ceiling == "" || v2 || ls.v1[lc.controller] == "") {
			continue
		}
		var dir string
		if v2 {
			dir = v2dir
			files = limitFilesV2(lc.controller, l)
		} else {
			base := ls.v1[lc.controller]
			if base == "" {
				return fail(fmt.Errorf("no %s controller for --%s", lc.controller, lc.limit))
			}
			if err := ls.ensureBase(base); err != nil {
				return fail(err)
			}
			if ceiling != "" {
				base = filepath.Join(base, ceiling)
			}
			dir = filepath.Join(base, id)
			if err := os.Mkdir(dir, 0o755); err != nil {
				return fail(err)
			}
			g.v1 = append(g.v1, dir)
		}
		if err := writeLimitFiles(dir, files); err != nil {
			return fail(err)
		}
		if lc.controller == "memory" {
			if v2 {
				g.oom = filepath.Join(dir, "memory.events")
			} else {
				g.oom = filepath.Join(dir, "memory.oom_control")
			}
		}
	}
	return g, nil
}

type limitFile struct {
	name, value string
	// optional: a kernel without it (no swap accounting) is no error.
	optional bool
}

// limitFiles are the v1 files setting l's limit for controller, in the
// order the kernel needs (the memory limit before memory+swap).
func limitFiles(controller string, l *env.Limits) []limitFile {
	switch {
	case controller == "memory" && l.Memory != 0:
		n := strconv.FormatInt(l.Memory, 10)
		return []limitFile{{"memory.limit_in_bytes", n, false}, {"memory.memsw.limit_in_bytes", n, true}}
	case controller == "cpu" && l.CPUs != 0:
		return []limitFile{{"cpu.cfs_period_us", strconv.Itoa(env.CPUPeriod), false}, {"cpu.cfs_quota_us", strconv.FormatInt(l.CPUQuota(), 10), false}}
	case controller == "pids" && l.Pids != 0:
		return []limitFile{{"pids.max", strconv.FormatInt(l.Pids, 10), false}}
	}
	return nil
}

// limitFilesV2 are limitFiles' v2 equivalents; memory.oom.group makes an
// OOM kill end the whole tree, not only its largest member.
func limitFilesV2(controller string, l *env.Limits) []limitFile {
	switch {
	case controller == "memory" && l.Memory != 0:
		n := strconv.FormatInt(l.Memory, 10)
		return []limitFile{{"memory.max", n, false}, {"memory.swap.max", "0", true}, {"memory.oom.group", "1", true}}
	case controller == "cpu" && l.CPUs != 0:
		return []limitFile{{"cpu.max", strconv.FormatInt(l.CPUQuota(), 10) + " " + strconv.Itoa(env.CPUPeriod), false}}
	case controller == "pids" && l.Pids != 0:
		return []limitFile{{"pids.max", strconv.FormatInt(l.Pids, 10), false}}
	}
	return nil
}

// fork runs start (a fork) on a thread placed in g's v1 cgroups, so the
// child starts in them; without v1 cgroups it just runs start.
func (g *limitGroups) fork(start func() error) error {
	if g == nil || len(g.v1) == 0 {
		return start()
	}
	errc := make(chan error, 1)
	go g.forkOnThread(start, errc)
	return <-errc
}

// forkOnThread locks its thread and never unlocks it: the thread ends
// with the goroutine, so no other goroutine ever runs, or allocates, or
// forks, in a limited cgroup. The main thread cannot end (the runtime
// parks it for ever instead, still in the cgroups), so there the fork is
// handed to another thread, and the main thread is given back untouched.
func (g *limitGroups) forkOnThread(start func() error, errc chan<- error) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		done := make(chan struct{})
		// Locked to this goroutine, the main thread cannot run that one.
		go func() {
			defer close(done)
			g.forkOnThread(start, errc)
		}()
		<-done
		runtime.UnlockOSThread()
		return
	}
	tid := []byte(strconv.Itoa(unix.Gettid()))
	for _, dir := range g.v1 {
		if err := os.WriteFile(filepath.Join(dir, "tasks"), tid, 0); err != nil {
			errc <- fmt.Errorf("limits: join %s: %w", dir, unwrapPath(err))
			return
		}
	}
	errc <- start()
}

// oomCounter is the counter of the limited memory's own cgroup, which
// counts exactly this tree's OOM kills (from 0: it is new), else def.
func (g *limitGroups) oomCounter(def oomCounter) oomCounter {
	if g == nil || g.oom == "" {
		return def
	}
	return oomCounter{path: g.oom}
}

// remove deletes g's v1 cgroups; one still populated (members outlived
// the leader) stays, for sweepStaleCgroups to take later.
//
// The kernel lets a cgroup go a moment after its last member is reaped
// (EBUSY until then): each is tried again for a bounded while.
func (g *limitGroups) remove() {
	if g == nil {
		return
	}
	deadline := time.Now().Add(cgroupRemoveWait)
	gone := true
	for _, dir := range g.v1 {
		if !removeCgroup(dir, deadline) {
			gone = false
		}
	}
	if gone && g.sys != nil {
		g.sys.pendingMu.Lock()
		delete(g.sys.pending, g)
		g.sys.pendingMu.Unlock()
	}
}

// cgroupRemoveWait bounds the wait for the kernel to let an empty cgroup
// go; one still populated (members that outlived the leader, or their
// supervisor) is left to sweepStaleCgroups.
const cgroupRemoveWait = time.Second

// removeCgroup removes the cgroup dir, trying again until deadline while
// the kernel has not let it go yet (EBUSY: usually a millisecond or two
// after its last member was reaped). It reports whether dir is gone.
func removeCgroup(dir string, deadline time.Time) bool {
	for {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return true
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// writeLimitFiles writes files into the cgroup dir, in order; an optional
// one the kernel does not have is skipped.
func writeLimitFiles(dir string, files []limitFile) error {
	for _, f := range files {
		err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.value), 0)
		if err != nil && !(f.optional && errors.Is(err, os.ErrNotExist)) {
			return fmt.Errorf("set %s=%s: %w", f.name, f.value, unwrapPath(err))
		}
	}
	return nil
}

// removeFor deletes the v1 cgroups of process id, wherever they were made
// (by this supervisor or its shim server).
func (ls *limitSupport) removeFor(id, ceiling string) {
	if ls == nil || !validID(id) {
		return
	}
	deadline := time.Now().Add(cgroupRemoveWait)
	for _, base := range ls.v1 {
		removeCgroup(filepath.Join(base, id), deadline)
		if ceiling != "" {
			removeCgroup(filepath.Join(base, ceiling, id), deadline)
		}
	}
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
