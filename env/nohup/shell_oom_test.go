package nohup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/shellquote"
)

// TestShellWstatusOOM checks the exit line of a command the OOM killer
// ended: " oom" after a SIGKILL (or a shell's 137) only when the count
// recorded at the start has risen; never for another status, a count that
// did not move, or a record that is missing or malformed.
func TestShellWstatusOOM(t *testing.T) {
	root := t.TempDir()
	counter := filepath.Join(root, "memory events") // a path with a space
	require.NoError(t, os.WriteFile(counter, []byte("low 0\nhigh 0\nmax 9\noom 5\noom_kill 4\noom_group_kill 0\n"), 0o644))
	dir := func(name, oom string) string {
		d := filepath.Join(root, name)
		require.NoError(t, os.Mkdir(d, 0o700))
		if oom != "" {
			require.NoError(t, os.WriteFile(filepath.Join(d, "oom"), []byte(oom), 0o600))
		}
		return d
	}
	rose, same := dir("rose", "3 "+counter+"\n"), dir("same", "4 "+counter+"\n")
	none, bad := dir("none", ""), dir("bad", "x "+counter+"\n")
	gone := dir("gone", "3 "+filepath.Join(root, "nosuch")+"\n")
	cases := []struct {
		status int
		dir    string
		want   string
	}{
		{9, rose, "signal 9 oom"},
		{137 << 8, rose, "code 137 oom"},
		{9, same, "signal 9"},
		{137 << 8, same, "code 137"},
		{15, rose, "signal 15"},
		{1 << 8, rose, "code 1"},
		{0x80 | 9, rose, "signal 9 oom"}, // a core dump flag changes nothing
		{9, none, "signal 9"},
		{9, bad, "signal 9"},
		{9, gone, "signal 9"},
		{9, "", "signal 9"},
	}
	var calls, want strings.Builder
	for _, c := range cases {
		calls.WriteString("wstatus " + itoa(c.status) + " " + shellquote.Quote(c.dir) + "; echo \"$st\"\n")
		want.WriteString(c.want + "\n")
	}
	forTestShells(t, func(t *testing.T, sh testShell) {
		assert.Equal(t, want.String(), sh.run(t, lib+calls.String()))
	})
}

// TestShellOOMFile checks where oomfile looks for the record, on crafted
// /proc/self/cgroup and /sys/fs/cgroup trees (corral_proc, corral_cgroup):
// cgroup v2's nearest cgroup with memory.events from ours upwards, on
// /sys/fs/cgroup or the hybrid layout's unified; a container's view, in
// which the mount's root is our cgroup; cgroup v1's memory hierarchy; and
// nothing where nothing is readable. oommark records "COUNT FILE".
func TestShellOOMFile(t *testing.T) {
	type layout struct {
		name   string
		cgroup string   // our /proc/self/cgroup
		files  []string // files to make under the cgroup root, "" content
		want   string   // relative to the cgroup root; "" for none
	}
	layouts := []layout{
		{"v2 own", "0::/user.slice/s.scope\n",
			[]string{"cgroup.controllers", "user.slice/s.scope/memory.events", "user.slice/memory.events"}, "user.slice/s.scope/memory.events"},
		{"v2 ancestor", "0::/user.slice/s.scope/corral\n",
			[]string{"cgroup.controllers", "user.slice/s.scope/corral/cgroup.procs", "user.slice/memory.events"}, "user.slice/memory.events"},
		{"v2 namespace", "0::/\n",
			[]string{"cgroup.controllers", "memory.events"}, "memory.events"},
		{"v2 container view", "0::/system.slice/docker-c0ffee.scope\n",
			[]string{"cgroup.controllers", "memory.events"}, "memory.events"},
		{"v2 no memory controller", "0::/a/b\n",
			[]string{"cgroup.controllers", "a/b/cgroup.procs"}, ""},
		{"hybrid v1 memory", "4:memory:/docker/c0ffee\n1:cpu,cpuacct:/docker/c0ffee\n0::/docker/c0ffee\n",
			[]string{"unified/cgroup.controllers", "unified/docker/c0ffee/cgroup.procs", "memory/docker/c0ffee/memory.oom_control"}, "memory/docker/c0ffee/memory.oom_control"},
		{"v1 container view", "4:memory:/docker/c0ffee\n",
			[]string{"memory/memory.oom_control"}, "memory/memory.oom_control"},
		{"v1 co-mounted list", "7:cpu,memory:/x\n",
			[]string{"memory/x/memory.oom_control"}, "memory/x/memory.oom_control"},
		{"nothing", "1:cpu:/x\n0::/x\n", []string{"cpu/x/cgroup.procs"}, ""},
	}
	forTestShells(t, func(t *testing.T, sh testShell) {
		for _, l := range layouts {
			t.Run(l.name, func(t *testing.T) {
				root, proc := t.TempDir(), t.TempDir()
				require.NoError(t, os.MkdirAll(filepath.Join(proc, "self"), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(proc, "self", "cgroup"), []byte(l.cgroup), 0o644))
				for _, f := range l.files {
					p := filepath.Join(root, f)
					require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
					require.NoError(t, os.WriteFile(p, []byte("oom_kill_disable 0\noom_kill 6\n"), 0o644))
				}
				d := t.TempDir()
				script := lib + "corral_proc=" + shellquote.Quote(proc) + " corral_cgroup=" + shellquote.Quote(root) + "\n" +
					// A SIGKILL exit read in between (no oom file there) must
					// leave the shell's lookup alone.
					"oomfile; echo \"$o_f\"; wstatus 9 " + shellquote.Quote(filepath.Join(root, "nosuch")) + "; oommark " + shellquote.Quote(d) + "\n"
				got := sh.run(t, script)
				want := ""
				if l.want != "" {
					want = filepath.Join(root, l.want)
				}
				assert.Equal(t, want+"\n", got)
				rec, err := os.ReadFile(filepath.Join(d, "oom"))
				if want == "" {
					assert.True(t, os.IsNotExist(err), "oom recorded without a count: %q", rec)
				} else {
					assert.Equal(t, "6 "+want+"\n", string(rec))
				}
			})
		}
	})
}

// TestParseStateOOM checks that the exit line's " oom" reaches
// ExitStatus.OOMKilled and that nothing else passes for it.
func TestParseStateOOM(t *testing.T) {
	p := &process{e: &Env{}}
	for line, want := range map[string]env.ExitStatus{
		"signal 9 oom":  {Code: -1, Signal: env.SIGKILL, OOMKilled: true},
		"code 137 oom":  {Code: 137, OOMKilled: true},
		"signal 9":      env.Signaled(env.SIGKILL),
		"code 137":      env.Exited(137),
		"signal 15 oom": {Code: -1, Signal: env.SIGTERM, OOMKilled: true},
	} {
		st, done, err := p.parseState(line)
		assert.NoError(t, err, line)
		assert.True(t, done, line)
		assert.Equal(t, want, st, line)
	}
	for _, line := range []string{"signal 9 oops", "code 137 oom x", "oom", "code oom"} {
		_, done, err := p.parseState(line)
		assert.True(t, done, line)
		assert.Error(t, err, line)
	}
}
