package local

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/procstat"
)

// Stats. A tree's members are Survivors' (its cgroup's processes, or its
// group and tagged processes found by a scan of /proc); the trees found by
// a scan are found together, in one pass over /proc. Each member's figures
// come from its /proc/PID/stat (CPU), status (VmRSS) and io (read_bytes,
// write_bytes). Only Linux has them: elsewhere Env does not implement
// env.TreeStatter, which callers find out by a type assertion.

var _ env.TreeStatter = (*Env)(nil)

// statJob is one tree of a TreeStats call.
type statJob struct {
	i          int // position in procs
	tree       tree
	leaderLive bool
}

// TreeStats implements env.TreeStatter. Handles of another Env, released
// ones and trees with no live member get nil.
func (e *Env) TreeStats(ctx context.Context, procs []env.Process) ([]*env.TreeStats, error) {
	out := make([]*env.TreeStats, len(procs))
	var jobs []statJob
	locked := childLocks{}
	defer locked.unlock()
	for i, h := range procs {
		switch p := h.(type) {
		case *child:
			if p.env != e || p.released.Load() {
				continue
			}
			locked.lock(p)
			jobs = append(jobs, statJob{i: i, tree: p.tree, leaderLive: !p.exiting})
		case *detached:
			if p.env != e || p.released.Load() {
				continue
			}
			jobs = append(jobs, statJob{i: i, tree: p.tree, leaderLive: p.leaderLive()})
		}
	}
	members, err := treeMembers(ctx, jobs)
	if err != nil {
		return nil, fmt.Errorf("local: tree stats: %w", err)
	}
	for k, j := range jobs {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("local: tree stats: %w", err)
		}
		out[j.i] = measureTree(members[k])
	}
	return out, nil
}

// childLocks holds the read lock of each child a batched look uses
// (TreeStats, InputWaits). As in Survivors, the lock keeps the waiter from
// reaping the leader, so that its PID (the group, the terminal's leader)
// names it while the look uses it. A handle given twice is locked once: a
// second RLock could wait behind the waiter's Lock, which waits for the
// first.
type childLocks map[*child]bool

func (l childLocks) lock(c *child) {
	if !l[c] {
		c.mu.RLock()
		l[c] = true
	}
}

func (l childLocks) unlock() {
	for c := range l {
		c.mu.RUnlock()
	}
}

// treeMembers returns each job's live members, as its tree's survivors
// would, with every scanned tree found in the same pass over /proc.
func treeMembers(ctx context.Context, jobs []statJob) ([][]int, error) {
	members := make([][]int, len(jobs))
	var scans []*scanTree
	var live []bool
	var scanJob []int
	for k, j := range jobs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if t, ok := j.tree.(*scanTree); ok {
			scans = append(scans, t)
			live = append(live, j.leaderLive)
			scanJob = append(scanJob, k)
			continue
		}
		pids, err := j.tree.survivors(j.leaderLive)
		if err != nil {
			return nil, err
		}
		members[k] = pids
	}
	if len(scans) == 0 {
		return members, nil
	}
	found, _, err := scanTrees(scans, live)
	if err != nil {
		return nil, err
	}
	for n, ms := range found {
		pids := make([]int, 0, len(ms))
		for _, m := range ms {
			pids = append(pids, m.pid)
		}
		members[scanJob[n]] = pids
	}
	return members, nil
}

// tickDuration is one clock tick of /proc/PID/stat's times.
const tickDuration = time.Second / procstat.TicksPerSecond

// measureTree sums the figures of pids, skipping those that have ended
// since they were listed; nil when none is left.
func measureTree(pids []int) *env.TreeStats {
	s := &env.TreeStats{}
	ioMissing := false
	for _, pid := range pids {
		st, err := procstat.Read(pid)
		if err != nil || st.Exited() {
			continue
		}
		dir := "/proc/" + strconv.Itoa(pid)
		rss, err := statusRSS(dir + "/status")
		if err != nil {
			continue // ended meanwhile
		}
		s.Pids++
		s.CPU += time.Duration(st.CPU()) * tickDuration
		s.RSS += rss
		// /proc/PID/io of another user's process needs ptrace rights: its
		// bytes are left out and the sum is marked incomplete.
		r, w, err := readIO(dir + "/io")
		if err != nil {
			ioMissing = true
			continue
		}
		s.ReadBytes += r
		s.WriteBytes += w
	}
	if s.Pids == 0 {
		return nil
	}
	if ioMissing {
		s.Missing = append(s.Missing, "io")
	}
	return s
}

// statusRSS reads VmRSS (kB) from a /proc/PID/status file, in bytes. A
// process without one (a kernel thread) has no resident memory of its own.
func statusRSS(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, ok, err := procField(data, "VmRSS:")
	if err != nil || !ok {
		return 0, err
	}
	return v * 1024, nil
}

// readIO reads read_bytes and write_bytes from a /proc/PID/io file.
func readIO(path string) (read, write int64, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	read, okR, errR := procField(data, "read_bytes:")
	write, okW, errW := procField(data, "write_bytes:")
	if errR != nil || errW != nil || !okR || !okW {
		return 0, 0, fmt.Errorf("%s: no read_bytes and write_bytes numbers", path)
	}
	return read, write, nil
}

// procField finds the line "NAME VALUE [unit]" of a /proc key-value file
// and returns VALUE.
func procField(data []byte, name string) (int64, bool, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte(name))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) == 0 {
			return 0, false, fmt.Errorf("%s has no value", name)
		}
		v, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("%s %w", name, err)
		}
		return v, true, nil
	}
	return 0, false, nil
}
