package local

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/corralhq/corral/env"
)

// oomCounter is the kernel's record of OOM kills for the memory cgroup a
// process is charged to, and its count when the process started. The
// record is the oom_kill line of memory.events (cgroup v2) or of
// memory.oom_control (v1): both count the processes of that cgroup the
// OOM killer ended, whatever limit (the cgroup's, an ancestor's, the
// machine's) ran out.
//
// The SIGKILL the OOM killer sends looks like any other, so a process is
// reported OOM-killed only when it ended by SIGKILL (or with code 137: the
// shell a command runs under reports its child's SIGKILL so) and the count
// rose during its life. The count is taken before the fork, so an OOM
// kill before the start (an earlier process of the same cgroup) is never
// blamed on it. Where the cgroup is the process's own (cgroup v2 with the
// memory controller enabled for corral's process cgroups) nothing else is
// counted; where it is shared (the supervisor's v1 memory cgroup, the
// nearest v2 ancestor with the memory controller), a SIGKILL from outside
// corral at a time another member was OOM-killed reads the same.
type oomCounter struct {
	path string // "" when no record is readable
	base uint64
}

// oomFinder finds the record for the processes this process forks. The
// lookup (our /proc/self/cgroup and mountinfo, a walk up the cgroup v2
// tree) is made once and kept: the cgroup a child is charged to does not
// change while this process stays in its cgroups. Only a child's own v2
// cgroup is looked at every time, since it is new each time.
type oomFinder struct {
	mu     sync.Mutex
	done   bool
	from   string // the v2 directory the kept lookup started from
	record string
}

// counter finds the record for a process about to be forked into the
// cgroup v2 directory v2dir ("" when it stays in ours) and takes the count.
// A v1 memory cgroup is inherited at fork, so ours is the child's.
func (f *oomFinder) counter(v2dir string) oomCounter {
	path := ""
	if v2dir != "" {
		// The memory controller enabled for corral's process cgroups gives
		// each process an exact record of its own.
		if own := filepath.Join(v2dir, "memory.events"); fileExists(own) {
			path = own
		}
	}
	if path == "" {
		from := ""
		if v2dir != "" {
			from = filepath.Dir(v2dir)
		}
		f.mu.Lock()
		if !f.done || f.from != from {
			f.done, f.from, f.record = true, from, lookupOOMRecord(from)
		}
		path = f.record
		f.mu.Unlock()
	}
	if path == "" {
		return oomCounter{}
	}
	n, ok := readOOMKills(path)
	if !ok {
		return oomCounter{}
	}
	return oomCounter{path: path, base: n}
}

// lookupOOMRecord is findOOMRecord for this process.
func lookupOOMRecord(v2dir string) string {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	return findOOMRecord(own, mounts, v2dir)
}

// killed reports whether the process that ended with st was OOM-killed:
// see oomCounter.
func (c oomCounter) killed(st env.ExitStatus) bool {
	if c.path == "" || !killedStatus(st) {
		return false
	}
	n, ok := readOOMKills(c.path)
	return ok && n > c.base
}

// mark sets st.OOMKilled when the counter says so.
func (c oomCounter) mark(st env.ExitStatus) env.ExitStatus {
	if c.killed(st) {
		st.OOMKilled = true
	}
	return st
}

// killedStatus reports a SIGKILL death: the signal itself, or the 137 a
// shell reports for a child it killed.
func killedStatus(st env.ExitStatus) bool {
	return st.Signal == env.SIGKILL || st.Signal == "" && st.Code == 128+9
}

// findOOMRecord returns the path of the record, or "", given our
// /proc/self/cgroup and /proc/self/mountinfo. cgroup v2 first: the
// nearest cgroup, from v2dir (else our own) upwards, that has the memory
// controller, which is the one memory is charged to; then the v1 memory
// hierarchy's cgroup of ours. On a hybrid host only one of the two has
// the memory controller.
func findOOMRecord(own, mounts []byte, v2dir string) string {
	v2mount, v2root, v1 := cgroupMounts(mounts)
	v2path, v1paths := procCgroups(own)
	if v2mount != "" {
		dir := v2dir
		if dir == "" && v2path != "" {
			dir = underMount(v2mount, v2root, v2path)
		}
		for dir != "" && (dir == v2mount || strings.HasPrefix(dir, v2mount+"/")) {
			f := filepath.Join(dir, "memory.events")
			if _, err := os.Stat(f); err == nil {
				return f
			}
			if dir == v2mount {
				break
			}
			dir = filepath.Dir(dir)
		}
	}
	if m, path := v1["memory"], v1paths["memory"]; m.mount != "" && path != "" {
		if dir := underMount(m.mount, m.root, path); dir != "" {
			f := filepath.Join(dir, "memory.oom_control")
			if _, err := os.Stat(f); err == nil {
				return f
			}
		}
	}
	return ""
}

// underMount maps a cgroup path as /proc/PID/cgroup shows it to its
// directory under a mount of that hierarchy whose root is root ("" when
// the cgroup lies outside what is mounted).
func underMount(mount, root, path string) string {
	if root != "/" {
		if path != root && !strings.HasPrefix(path, root+"/") {
			return ""
		}
		path = strings.TrimPrefix(path, root)
	}
	return filepath.Join(mount, path)
}

// procCgroups reads /proc/PID/cgroup's content: the cgroup v2 path, and
// each v1 controller's path.
func procCgroups(own []byte) (v2path string, v1 map[string]string) {
	v1 = map[string]string{}
	for line := range strings.SplitSeq(string(own), "\n") {
		// hierarchy-ID:controller-list:path; the path may hold colons.
		_, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		ctrls, path, ok := strings.Cut(rest, ":")
		switch {
		case !ok:
		case ctrls == "" && strings.HasPrefix(line, "0::"):
			v2path = path
		default:
			for c := range strings.SplitSeq(ctrls, ",") {
				v1[c] = path
			}
		}
	}
	return v2path, v1
}

// v1Mount is a cgroup v1 hierarchy's mount point and the cgroup it shows
// as its root.
type v1Mount struct{ mount, root string }

// cgroupMounts finds, in mountinfo, the cgroup2 mount and each v1
// controller's mount, with the cgroup each mount shows as its root.
func cgroupMounts(mountinfo []byte) (v2mount, v2root string, v1 map[string]v1Mount) {
	v1 = map[string]v1Mount{}
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields, post2 := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(post2) < 1 {
			continue
		}
		switch {
		case post2[0] == "cgroup2" && v2mount == "":
			v2mount, v2root = unescapeMount(fields[4]), unescapeMount(fields[3])
		case post2[0] == "cgroup" && len(post2) >= 3:
			for c := range strings.SplitSeq(post2[2], ",") {
				if _, taken := v1[c]; !taken {
					v1[c] = v1Mount{unescapeMount(fields[4]), unescapeMount(fields[3])}
				}
			}
		}
	}
	return v2mount, v2root, v1
}

// readOOMKills reads the oom_kill count of a memory.events or
// memory.oom_control file.
func readOOMKills(path string) (uint64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// treeCgroupDir is the cgroup v2 directory a process of t is started in,
// "" when it stays in the supervisor's.
func treeCgroupDir(t tree) string {
	if ct, ok := t.(*cgroupTree); ok {
		return ct.dir
	}
	return ""
}
