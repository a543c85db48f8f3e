package local

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/testing/memcgtest"
)

// TestFindOOMRecord checks where the record of OOM kills is looked for,
// on crafted cgroup mounts: the nearest v2 cgroup with the memory
// controller, from the process's cgroup upwards; else the v1 memory
// hierarchy's, through the mount's root (a container sees its own cgroup
// as the root of the mount).
func TestFindOOMRecord(t *testing.T) {
	root := t.TempDir()
	v2, v1 := filepath.Join(root, "unified"), filepath.Join(root, "memory")
	mk := func(dir, file string) string {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		f := filepath.Join(dir, file)
		require.NoError(t, os.WriteFile(f, []byte("oom_kill 0\n"), 0o644))
		return f
	}
	mountinfo := func(lines ...string) []byte { return []byte(strings.Join(lines, "\n") + "\n") }
	v2line := "41 31 0:38 / " + v2 + " rw,relatime - cgroup2 cgroup2 rw"
	v1line := func(mroot string) string {
		return "35 31 0:32 " + mroot + " " + v1 + " rw,relatime - cgroup cgroup rw,memory"
	}
	cpuLine := "32 31 0:29 / " + filepath.Join(root, "cpu") + " rw,relatime - cgroup cgroup rw,cpu"

	// v2: the process cgroup has no memory.events, its grandparent has.
	ancestor := mk(filepath.Join(v2, "user.slice", "s"), "memory.events")
	require.NoError(t, os.MkdirAll(filepath.Join(v2, "user.slice", "s", "corral", "abc"), 0o755))
	own := []byte("0::/user.slice/s\n")
	assert.Equal(t, ancestor, findOOMRecord(own, mountinfo(v2line), filepath.Join(v2, "user.slice", "s", "corral", "abc")))
	assert.Equal(t, ancestor, findOOMRecord(own, mountinfo(v2line), ""), "own cgroup")
	// The process cgroup's own record wins when it has one.
	exact := mk(filepath.Join(v2, "user.slice", "s", "corral", "abc"), "memory.events")
	assert.Equal(t, exact, findOOMRecord(own, mountinfo(v2line), filepath.Join(v2, "user.slice", "s", "corral", "abc")))

	// Hybrid: v2 without the memory controller anywhere, v1 memory.
	hybridV2 := filepath.Join(root, "hybrid")
	require.NoError(t, os.MkdirAll(filepath.Join(hybridV2, "corral", "x"), 0o755))
	rec := mk(filepath.Join(v1, "docker", "c0ffee"), "memory.oom_control")
	own = []byte("5:cpu,cpuacct:/docker/c0ffee\n4:memory:/docker/c0ffee\n0::/\n")
	hv2line := "41 31 0:38 / " + hybridV2 + " rw,relatime - cgroup2 cgroup2 rw"
	assert.Equal(t, rec, findOOMRecord(own, mountinfo(cpuLine, v1line("/"), hv2line), filepath.Join(hybridV2, "corral", "x")))

	// A container: the mount's root is the container's cgroup.
	crec := mk(filepath.Join(root, "ctr"), "memory.oom_control")
	ctrLine := "113 109 0:32 /docker/c0ffee " + filepath.Join(root, "ctr") + " ro,nosuid - cgroup cgroup rw,memory"
	assert.Equal(t, crec, findOOMRecord(own, mountinfo(ctrLine), ""))
	// A cgroup outside what is mounted has no readable record.
	assert.Empty(t, findOOMRecord([]byte("4:memory:/elsewhere\n"), mountinfo(ctrLine), ""))
	// Nothing mounted, nothing found.
	assert.Empty(t, findOOMRecord(own, mountinfo(cpuLine), ""))
}

func TestReadOOMKills(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		content string
		want    uint64
		ok      bool
	}{
		"v2":      {"low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n", 2, true},
		"v1":      {"oom_kill_disable 0\nunder_oom 0\noom_kill 7\n", 7, true},
		"old v1":  {"oom_kill_disable 0\nunder_oom 0\n", 0, false},
		"garbage": {"oom_kill x\n", 0, false},
	} {
		f := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		require.NoError(t, os.WriteFile(f, []byte(tc.content), 0o644))
		n, ok := readOOMKills(f)
		assert.Equal(t, tc.ok, ok, name)
		assert.Equal(t, tc.want, n, name)
	}
	_, ok := readOOMKills(filepath.Join(dir, "missing"))
	assert.False(t, ok)
}

// TestOOMCounterMarks checks the rule: SIGKILL or 137, and a count that
// rose since the start.
func TestOOMCounterMarks(t *testing.T) {
	f := filepath.Join(t.TempDir(), "memory.events")
	set := func(n int) { require.NoError(t, os.WriteFile(f, fmt.Appendf(nil, "oom 1\noom_kill %d\n", n), 0o644)) }
	set(3)
	c := oomCounter{path: f, base: 3}
	kill, sh137 := env.Signaled(env.SIGKILL), env.Exited(137)
	assert.False(t, c.mark(kill).OOMKilled, "no kill since the start")
	set(4)
	assert.True(t, c.mark(kill).OOMKilled)
	assert.True(t, c.mark(sh137).OOMKilled, "a shell's 137 for its child")
	assert.False(t, c.mark(env.Signaled(env.SIGTERM)).OOMKilled, "not a SIGKILL")
	assert.False(t, c.mark(env.Exited(1)).OOMKilled)
	assert.False(t, oomCounter{}.mark(kill).OOMKilled, "no record")
}

// oomHelperEnvVar makes the test binary the supervisor of
// TestOOMKilledInMemoryCgroup, run inside the test's memory cgroup: it
// runs the cases in order and prints each one's status as a JSON line.
const oomHelperEnvVar = "CORRAL_LOCAL_TEST_OOM"

func init() { helperRoles[oomHelperEnvVar] = oomHelperMain }

type oomResult struct {
	Name   string         `json:"name"`
	Status env.ExitStatus `json:"status"`
	Err    string         `json:"err,omitempty"`
}

func oomHelperMain() int {
	e, err := New(Options{StateDir: os.Getenv(oomHelperEnvVar)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	enc := json.NewEncoder(os.Stdout)
	run := func(name string, spec env.Spec, kill bool) {
		res := oomResult{Name: name}
		p, err := e.Start(ctx, spec)
		if err == nil {
			if kill {
				// kill -9 from outside corral, after the OOM kills above.
				err = syscall.Kill(p.PID(), syscall.SIGKILL)
			}
			if err == nil {
				res.Status, err = p.Wait(ctx)
			}
			if spec.Detach {
				_ = p.Remove(ctx)
			}
			_ = p.Release()
		}
		if err != nil {
			res.Err = err.Error()
		}
		_ = enc.Encode(res)
	}
	run("hog", env.Spec{Command: "tail /dev/zero"}, false)
	run("hog-exec", env.Spec{Command: "exec tail /dev/zero"}, false)
	run("hog-detached", env.Spec{Command: "tail /dev/zero", Detach: true}, false)
	run("kill9", env.Spec{Command: "exec sleep 60"}, true)
	run("kill9-detached", env.Spec{Command: "exec sleep 60", Detach: true}, true)
	run("exit137", env.Spec{Command: "exit 137"}, false)
	return 0
}

// TestOOMKilledInMemoryCgroup runs a memory hog for real in a memory
// cgroup the test makes (64 MiB more than the supervisor needs): the OOM
// killer ends it, with pipes and detached, and Wait says so. A process of
// the same cgroup started after those kills and ended by a plain kill -9,
// and one that exits 137 on its own, are not called OOM-killed.
func TestOOMKilledInMemoryCgroup(t *testing.T) {
	cg := memcgtest.New(t, 192<<20)
	cmd := cg.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), oomHelperEnvVar+"="+t.TempDir())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "helper: %s", stderr.String())
	got := map[string]oomResult{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		var r oomResult
		require.NoError(t, json.Unmarshal([]byte(line), &r), "helper said %q", line)
		got[r.Name] = r
	}
	t.Logf("helper: %s", out)
	for _, name := range []string{"hog", "hog-exec", "hog-detached"} {
		r := got[name]
		assert.Empty(t, r.Err, name)
		assert.True(t, r.Status.OOMKilled, "%s: %v", name, r.Status)
		assert.True(t, killedStatus(r.Status), "%s: %v", name, r.Status)
	}
	assert.Equal(t, env.SIGKILL, got["hog-exec"].Status.Signal)
	for _, name := range []string{"kill9", "kill9-detached"} {
		r := got[name]
		assert.Empty(t, r.Err, name)
		assert.Equal(t, env.Signaled(env.SIGKILL), r.Status, name)
	}
	assert.Equal(t, env.Exited(137), got["exit137"].Status)
	n, err := cg.OOMKills()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n, uint64(3), "the kernel's count of OOM kills in the test's cgroup")
}

// BenchmarkOOMRecord is what reading the kernel's record of OOM kills adds
// to a process's life (corral: finding the record and taking the count
// before the fork, reading it again at a SIGKILL exit), against the whole
// life of a process with pipes in the same Env (baseline: start, output,
// wait). The ratio is the share of a start the record costs.
func BenchmarkOOMRecord(b *testing.B) {
	b.Run("corral", func(b *testing.B) {
		var f oomFinder
		for b.Loop() {
			c := f.counter("")
			_ = c.mark(env.Signaled(env.SIGKILL))
		}
	})
	b.Run("baseline", func(b *testing.B) {
		e := benchEnv(b, !cgroupUsable())
		ctx := context.Background()
		for b.Loop() {
			runWhole(ctx, b, e, env.Spec{Command: "true"})
		}
	})
}
