//go:build linux

package memcgtest

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Cgroup is a memory cgroup made for one test.
type Cgroup struct {
	// Dir is the cgroup's directory.
	Dir string
	// V2 says which hierarchy it is in.
	V2 bool
}

// New makes a memory cgroup limited to limit bytes, swap included, or
// skips the test. The test's cleanup kills what is left in it (only
// processes the test put there) and removes it.
func New(t testing.TB, limit int64) *Cgroup {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making a memory cgroup needs root")
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skipf("no /proc/self/cgroup: %v", err)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Skipf("no /proc/self/mountinfo: %v", err)
	}
	name := "corral-test-oom-" + randomHex()
	c, why := make1(own, mounts, name, limit)
	if c == nil {
		t.Skipf("no memory cgroup for the test: %s", why)
	}
	t.Cleanup(func() {
		if err := c.remove(); err != nil {
			t.Errorf("memcgtest: %v", err)
		}
	})
	return c
}

// make1 tries cgroup v1's memory hierarchy, then v2.
func make1(own, mounts []byte, name string, limit int64) (*Cgroup, string) {
	v1dir, v2dir := ownDirs(own, mounts)
	var why []string
	if v1dir != "" {
		dir := filepath.Join(v1dir, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			why = append(why, fmt.Sprintf("v1: %v", err))
		} else {
			c := &Cgroup{Dir: dir}
			l := []byte(strconv.FormatInt(limit, 10))
			err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), l, 0)
			if err == nil {
				// Without swap in the limit the process would swap, not die.
				if _, serr := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes")); serr == nil {
					err = os.WriteFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"), l, 0)
				}
			}
			if err == nil {
				return c, ""
			}
			_ = os.Remove(dir)
			why = append(why, fmt.Sprintf("v1: set the limit: %v", err))
		}
	}
	if v2dir != "" {
		dir := filepath.Join(v2dir, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			why = append(why, fmt.Sprintf("v2: %v", err))
		} else {
			c := &Cgroup{Dir: dir, V2: true}
			if _, err := os.Stat(filepath.Join(dir, "memory.max")); err != nil {
				_ = os.Remove(dir)
				why = append(why, "v2: the test's cgroup does not hand the memory controller down (cgroup.subtree_control)")
			} else {
				l := []byte(strconv.FormatInt(limit, 10))
				err := os.WriteFile(filepath.Join(dir, "memory.max"), l, 0)
				if err == nil {
					_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0)
					return c, ""
				}
				_ = os.Remove(dir)
				why = append(why, fmt.Sprintf("v2: set the limit: %v", err))
			}
		}
	}
	if len(why) == 0 {
		return nil, "neither a cgroup v1 memory hierarchy nor cgroup v2 is mounted"
	}
	return nil, strings.Join(why, "; ")
}

// ownDirs returns the directories of our own cgroups: the v1 memory
// hierarchy's and the v2 one, "" where there is none.
func ownDirs(own, mounts []byte) (v1, v2 string) {
	var v1path, v2path string
	for line := range strings.SplitSeq(string(own), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2path = parts[2]
		case hasWord(parts[1], "memory"):
			v1path = parts[2]
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(mounts))
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, p := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(p) < 3 {
			continue
		}
		root, mount := f[3], f[4]
		switch {
		case p[0] == "cgroup2" && v2 == "" && v2path != "":
			v2 = under(mount, root, v2path)
		case p[0] == "cgroup" && v1 == "" && v1path != "" && hasWord(p[2], "memory"):
			v1 = under(mount, root, v1path)
		}
	}
	return v1, v2
}

func under(mount, root, path string) string {
	if root != "/" {
		if path != root && !strings.HasPrefix(path, root+"/") {
			return ""
		}
		path = strings.TrimPrefix(path, root)
	}
	return filepath.Join(mount, path)
}

func hasWord(list, w string) bool {
	for x := range strings.SplitSeq(list, ",") {
		if x == w {
			return true
		}
	}
	return false
}

func randomHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Command returns a command that enters the cgroup and then execs name
// with args: a shell writes its own PID into cgroup.procs first, so
// everything the program forks is in the cgroup from its first
// instruction on.
func (c *Cgroup) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("/bin/sh", append([]string{"-c", `echo $$ >"$1" && shift && exec "$@"`, "sh",
		filepath.Join(c.Dir, "cgroup.procs"), name}, args...)...)
}

// OOMKills is the kernel's count of the processes of the cgroup the OOM
// killer ended.
func (c *Cgroup) OOMKills() (uint64, error) {
	f := "memory.oom_control"
	if c.V2 {
		f = "memory.events"
	}
	data, err := os.ReadFile(filepath.Join(c.Dir, f))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no oom_kill line in %s", f)
}

// Procs lists the processes in the cgroup.
func (c *Cgroup) Procs() ([]int, error) {
	data, err := os.ReadFile(filepath.Join(c.Dir, "cgroup.procs"))
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

// remove kills what is left in the cgroup and removes it. Every process
// in it was put there by the test (the cgroup is the test's own).
func (c *Cgroup) remove() error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids, err := c.Procs()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err == nil && len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v left in %s after SIGKILL", pids, c.Dir)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		err := os.Remove(c.Dir)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		// A process just reaped may keep the cgroup busy a moment.
		if time.Now().After(deadline) {
			return fmt.Errorf("remove %s: %w", c.Dir, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
