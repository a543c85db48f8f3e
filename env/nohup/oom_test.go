//go:build linux

package nohup_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
	"github.com/corralhq/corral/env/nohup/nohuptest"
	"github.com/corralhq/corral/internal/shellquote"
	"github.com/corralhq/corral/internal/testing/memcgtest"
)

// TestOOMKilledInMemoryCgroup runs the engine's scripts in a 64 MiB memory
// cgroup the test makes (the transport's shell enters it before it runs a
// script), with and without resident shells (and so armed spares), and a
// memory hog for real: the OOM killer ends it and Wait says so, whether
// the command's shell reports the SIGKILL as 137 or the hog is the leader.
// A process of the same cgroup started after those kills and ended by a
// plain kill -9, and one that exits 137 on its own, are not called
// OOM-killed.
func TestOOMKilledInMemoryCgroup(t *testing.T) {
	cg := memcgtest.New(t, 64<<20)
	enter := filepath.Join(t.TempDir(), "enter")
	require.NoError(t, os.WriteFile(enter, []byte("#!/bin/sh\necho $$ >"+shellquote.Quote(filepath.Join(cg.Dir, "cgroup.procs"))+" || exit 125\nexec /bin/sh \"$@\"\n"), 0o755))
	for _, resident := range []bool{false, true} {
		name := "sessions"
		if resident {
			name = "resident"
		}
		t.Run(name, func(t *testing.T) {
			tr := &nohuptest.Local{Shell: enter, Env: os.Environ(), Resident: resident}
			e, err := nohup.New(tr, nohup.Options{BaseDir: t.TempDir() + "/state"})
			require.NoError(t, err)
			t.Cleanup(func() { _ = e.Close() })
			ctx := testCtx(t)
			run := func(command string, kill bool) env.ExitStatus {
				t.Helper()
				p := start(t, e, env.Spec{Command: command})
				if kill {
					// kill -9 from outside corral, after the OOM kills.
					require.NoError(t, syscall.Kill(p.PID(), syscall.SIGKILL))
				}
				st, err := p.Wait(ctx)
				require.NoError(t, err, command)
				return st
			}
			for i := range 2 { // a resident engine arms spares from its second start on
				st := run("tail /dev/zero", false)
				assert.True(t, st.OOMKilled, "round %d: %v", i, st)
				assert.Contains(t, []env.ExitStatus{env.Exited(137), env.Signaled(env.SIGKILL)}, env.ExitStatus{Code: st.Code, Signal: st.Signal})
			}
			assert.Equal(t, env.ExitStatus{Code: -1, Signal: env.SIGKILL, OOMKilled: true}, run("exec tail /dev/zero", false))
			assert.Equal(t, env.Signaled(env.SIGKILL), run("exec sleep 60", true))
			assert.Equal(t, env.Exited(137), run("exit 137", false))
		})
	}
	n, err := cg.OOMKills()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n, uint64(6), "the kernel's count of OOM kills in the test's cgroup")
}

// BenchmarkOOMRecordStart is the whole life of `true` on resident shells
// (start, output, wait, remove) with the record of OOM kills read at the
// start (corral: this machine's cgroup file system) against the same with
// none to read (baseline: corral_cgroup names a missing directory), in the
// same run: what the record adds to a start inside a sandbox.
func BenchmarkOOMRecordStart(b *testing.B) {
	for _, c := range []struct {
		name string
		env  []string
	}{{"corral", os.Environ()}, {"baseline", append(os.Environ(), "corral_cgroup=/nonexistent")}} {
		b.Run(c.name, func(b *testing.B) {
			tr := &nohuptest.Local{Shell: "/bin/sh", Env: c.env, Resident: true}
			e, err := nohup.New(tr, nohup.Options{BaseDir: b.TempDir() + "/s"})
			require.NoError(b, err)
			defer e.Close()
			ctx := context.Background()
			for b.Loop() {
				p, err := e.Start(ctx, env.Spec{Command: "true"})
				require.NoError(b, err)
				_, err = p.Wait(ctx)
				require.NoError(b, err)
				require.NoError(b, p.Remove(ctx))
			}
		})
	}
}
