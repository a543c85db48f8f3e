package local

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/procstat"
)

// TestTagged: a new Env over the same state directory finds a detached
// process by the Spec.Tag it was started with — and only that one, not a
// process with another tag nor one started without Detach — and its
// handle kills the tree. A directory without state.json is waited for
// only while it is young (a start under way), not once it is old.
func TestTagged(t *testing.T) {
	mechanisms(t, func(t *testing.T, disableCgroup bool) {
		stateDir := t.TempDir()
		e1 := newTestEnvIn(t, stateDir, disableCgroup)
		m1, m2 := marker(), marker()
		// Its supervisor's handle is dropped, as a crash would.
		p1, err := e1.Start(testCtx(t), env.Spec{Command: "sleep " + m1 + " & sleep " + m1, Detach: true, Tag: "proc_aaaaaaaaaaaa"})
		require.NoError(t, err)
		require.NoError(t, p1.Release())
		// Start returns once sh runs; its two sleeps come after (on a
		// loaded machine, after the look below, which then saw two).
		require.Eventually(t, func() bool { return len(pids(m1)) == 2 }, condWait, condPoll, "the two sleeps did not start")
		start(t, e1, env.Spec{Command: "sleep " + m2, Detach: true, Tag: "proc_bbbbbbbbbbbb"})
		start(t, e1, env.Spec{Command: "sleep " + marker(), Tag: "proc_aaaaaaaaaaaa"}) // not detached: e1's own child
		// An old directory whose start never reached the server.
		old := filepath.Join(stateDir, "0123456789abcdef")
		require.NoError(t, os.Mkdir(old, 0o700))
		past := time.Now().Add(-time.Hour)
		require.NoError(t, os.Chtimes(old, past, past))

		e2 := newTestEnvIn(t, stateDir, disableCgroup)
		began := time.Now()
		found, err := e2.Tagged(testCtx(t), []string{"proc_aaaaaaaaaaaa", "proc_cccccccccccc", "", "bad tag"})
		require.NoError(t, err)
		assert.Less(t, time.Since(began), taggedPendingWait, "an old directory without state.json was waited for")
		require.Len(t, found, 1, "found %v", found)
		require.Len(t, found["proc_aaaaaaaaaaaa"], 1)
		h := found["proc_aaaaaaaaaaaa"][0]
		surv, err := h.Survivors(testCtx(t))
		require.NoError(t, err)
		assert.Len(t, surv, 3, "the tree: sh and two sleeps")
		require.NoError(t, h.Signal(testCtx(t), env.SIGKILL))
		require.Eventually(t, func() bool {
			s, err := h.Survivors(testCtx(t))
			return err == nil && len(s) == 0
		}, condWait, condPoll, "the tagged tree did not end")
		_, err = h.Wait(testCtx(t))
		require.NoError(t, err)
		require.NoError(t, h.Remove(testCtx(t)))
		assert.Empty(t, pids(m1), "processes of the tagged tree")
		assert.NotEmpty(t, pids(m2), "a process of another tag was hit")

		// A young directory without state.json: a start under way, waited
		// for up to taggedPendingWait, then left out.
		young := filepath.Join(stateDir, "fedcba9876543210")
		require.NoError(t, os.Mkdir(young, 0o700))
		found, err = e2.Tagged(testCtx(t), []string{"proc_bbbbbbbbbbbb"})
		require.NoError(t, err)
		require.Len(t, found["proc_bbbbbbbbbbbb"], 1)
		for _, h := range found["proc_bbbbbbbbbbbb"] {
			require.NoError(t, h.Release())
		}
	})
}

// pids returns the live processes that have m as an argument.
func pids(m string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := procstat.Read(pid); err != nil || st.Exited() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if slices.Contains(strings.Split(string(b), "\x00"), m) {
			out = append(out, pid)
		}
	}
	return out
}
