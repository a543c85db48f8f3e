package nohup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/internal/shellquote"
)

// cgroupLayout is a crafted /proc/self/cgroup and cgroup tree
// (corral_proc, corral_cgroup) for the limit cgroups' shell functions.
type cgroupLayout struct {
	name   string
	cgroup string            // our /proc/self/cgroup
	files  map[string]string // files under the cgroup root, with content
	want   string            // corral_cgprobe's line, root written as R
}

// cgroupLayouts are the hierarchies a sandbox may have.
var cgroupLayouts = []cgroupLayout{
	{"v1 each controller", "9:pids:/u\n4:memory:/m\n1:cpu,cpuacct:/c\n0::/u\n",
		map[string]string{"memory/m/cgroup.procs": "", "cpu,cpuacct/c/cgroup.procs": "", "pids/u/cgroup.procs": ""},
		"v1 R/memory/m/corral-sh R/cpu,cpuacct/c/corral-sh R/pids/u/corral-sh"},
	{"v1 cpu mounted alone", "9:pids:/\n4:memory:/\n1:cpu:/\n",
		map[string]string{"memory/cgroup.procs": "", "cpu/cgroup.procs": "", "pids/cgroup.procs": ""},
		"v1 R/memory/corral-sh R/cpu/corral-sh R/pids/corral-sh"},
	{"v1 container view", "9:pids:/docker/c0ffee\n4:memory:/docker/c0ffee\n1:cpu,cpuacct:/docker/c0ffee\n",
		map[string]string{"memory/cgroup.procs": "", "cpu,cpuacct/cgroup.procs": "", "pids/cgroup.procs": ""},
		"v1 R/memory/corral-sh R/cpu,cpuacct/corral-sh R/pids/corral-sh"},
	{"v1 without pids", "4:memory:/m\n1:cpu:/c\n",
		map[string]string{"memory/m/cgroup.procs": "", "cpu/c/cgroup.procs": ""},
		"none the cgroup v1 pids controller is not mounted"},
	{"v2 delegated parent", "0::/user.slice/u.service/s.scope\n",
		map[string]string{"cgroup.controllers": "cpu memory pids", "user.slice/u.service/cgroup.subtree_control": "cpu memory pids",
			"user.slice/u.service/cgroup.procs": "", "user.slice/u.service/s.scope/cgroup.procs": ""},
		"v2 R/user.slice/u.service/corral-sh"},
	{"v2 hybrid unified, root", "4:blkio:/\n0::/\n",
		map[string]string{"unified/cgroup.controllers": "cpu memory pids", "unified/cgroup.subtree_control": "cpu io memory pids",
			"unified/cgroup.procs": ""},
		"v2 R/unified/corral-sh"},
	{"v2 nothing handed down", "0::/a/b\n",
		map[string]string{"cgroup.controllers": "cpu memory pids", "cgroup.subtree_control": "memory", "a/cgroup.subtree_control": "memory pids",
			"a/cgroup.procs": "", "a/b/cgroup.procs": ""},
		"none no cgroup v2 above this shell's hands memory, cpu and pids down and is writable by this user; delegate one"},
	{"no memory anywhere", "1:cpu:/x\n",
		map[string]string{"cpu/x/cgroup.procs": ""},
		"none the memory controller is not mounted"},
}

// craft writes l's tree and returns its cgroup root and /proc.
func (l cgroupLayout) craft(t *testing.T) (root, proc string) {
	t.Helper()
	root, proc = t.TempDir(), t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "self"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(proc, "self", "cgroup"), []byte(l.cgroup), 0o644))
	for f, content := range l.files {
		p := filepath.Join(root, f)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content+"\n"), 0o644))
	}
	return root, proc
}

// TestShellCgroupProbe checks where corral_cgprobe puts the limit cgroups
// on each layout, and why it finds none.
func TestShellCgroupProbe(t *testing.T) {
	forTestShells(t, func(t *testing.T, sh testShell) {
		for _, l := range cgroupLayouts {
			t.Run(l.name, func(t *testing.T) {
				root, proc := l.craft(t)
				got := sh.run(t, lib+"corral_proc="+shellquote.Quote(proc)+" corral_cgroup="+shellquote.Quote(root)+"\ncorral_cgprobe\n")
				assert.Equal(t, strings.ReplaceAll(l.want, "R/", root+"/")+"\n", got)
			})
		}
	})
}

// TestShellCgroupMake checks the files cgmake writes for each limit, that
// it lists the cgroups in DIR/cg and records their OOM count, that a limit
// not asked for leaves its file alone, and that cgdrop removes the
// cgroups, their bases and the list.
func TestShellCgroupMake(t *testing.T) {
	forTestShells(t, func(t *testing.T, sh testShell) {
		for _, l := range cgroupLayouts {
			if !strings.HasPrefix(l.want, "v") {
				continue
			}
			t.Run(l.name, func(t *testing.T) {
				root, proc := l.craft(t)
				d := filepath.Join(t.TempDir(), "0123456789abcdef0123456789abcdef")
				require.NoError(t, os.Mkdir(d, 0o700))
				bases := strings.Fields(strings.ReplaceAll(l.want, "R/", root+"/"))[1:]
				// The memory cgroup's OOM count, as the kernel shows it
				// in a cgroup as soon as it exists.
				memFile := "memory.oom_control"
				if strings.HasPrefix(l.want, "v2") {
					memFile = "memory.events"
				}
				pre := "mkdir() { command mkdir \"$@\" && case $1 in */0123456789abcdef0123456789abcdef) echo 'oom_kill 0' >\"$1/" + memFile + "\" ;; esac; }\n"
				script := lib + pre + "corral_proc=" + shellquote.Quote(proc) + " corral_cgroup=" + shellquote.Quote(root) + "\n" +
					"cgmake " + shellquote.Quote(d) + " 104857600 150000 64 && echo made\n"
				assert.Equal(t, "made\n", sh.run(t, script))
				cg, err := os.ReadFile(filepath.Join(d, "cg"))
				require.NoError(t, err)
				var listed []string
				for _, b := range bases {
					listed = append(listed, filepath.Join(b, filepath.Base(d)))
				}
				assert.Equal(t, strings.Join(listed, "\n")+"\n", string(cg))
				read := func(p string) string {
					b, err := os.ReadFile(p)
					if err != nil {
						return "<" + err.Error() + ">"
					}
					return strings.TrimSpace(string(b))
				}
				if len(listed) == 3 {
					assert.Equal(t, "104857600", read(filepath.Join(listed[0], "memory.limit_in_bytes")))
					assert.Equal(t, "100000", read(filepath.Join(listed[1], "cpu.cfs_period_us")))
					assert.Equal(t, "150000", read(filepath.Join(listed[1], "cpu.cfs_quota_us")))
					assert.Equal(t, "64", read(filepath.Join(listed[2], "pids.max")))
				} else {
					assert.Equal(t, "+memory +cpu +pids", read(filepath.Join(bases[0], "cgroup.subtree_control")))
					assert.Equal(t, "104857600", read(filepath.Join(listed[0], "memory.max")))
					assert.Equal(t, "150000 100000", read(filepath.Join(listed[0], "cpu.max")))
					assert.Equal(t, "64", read(filepath.Join(listed[0], "pids.max")))
				}
				assert.Equal(t, "0 "+filepath.Join(listed[0], memFile), read(filepath.Join(d, "oom")))

				// Only a pids limit: the memory file is not written.
				d2 := filepath.Join(t.TempDir(), "fedcba9876543210fedcba9876543210")
				require.NoError(t, os.Mkdir(d2, 0o700))
				sh.run(t, lib+"corral_proc="+shellquote.Quote(proc)+" corral_cgroup="+shellquote.Quote(root)+"\ncgmake "+shellquote.Quote(d2)+" 0 0 32\n")
				assert.NoFileExists(t, filepath.Join(bases[0], filepath.Base(d2), "memory.limit_in_bytes"))
				assert.NoFileExists(t, filepath.Join(bases[0], filepath.Base(d2), "memory.max"))

				// cgdrop: rmdir of a crafted cgroup fails while files are
				// in it (a real one holds only kernel files), so empty them
				// first, as the kernel does.
				for _, c := range listed {
					entries, err := os.ReadDir(c)
					require.NoError(t, err)
					for _, e := range entries {
						require.NoError(t, os.Remove(filepath.Join(c, e.Name())))
					}
				}
				sh.run(t, lib+"cgdrop "+shellquote.Quote(d)+"\n")
				for _, c := range listed {
					assert.NoDirExists(t, c)
				}
				assert.NoFileExists(t, filepath.Join(d, "cg"))
			})
		}
	})
}
