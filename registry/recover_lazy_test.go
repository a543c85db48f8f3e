//go:build linux

package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
)

// sandboxCalls counts what a registry asks of its environment that costs
// a sandbox a round trip or a read: Attach, and Output.
type sandboxCalls struct{ attaches, outputs atomic.Int64 }

type countingEnv struct {
	env.Environment
	n *sandboxCalls
}

func (c countingEnv) Attach(ctx context.Context, ref env.Ref) (env.Process, error) {
	c.n.attaches.Add(1)
	h, err := c.Environment.Attach(ctx, ref)
	if err != nil {
		return nil, err
	}
	return countingProcess{h, c.n}, nil
}

type countingProcess struct {
	env.Process
	n *sandboxCalls
}

func (p countingProcess) Output(ctx context.Context, offset int64) (io.ReadCloser, error) {
	p.n.outputs.Add(1)
	return p.Process.Output(ctx, offset)
}

// restartedLocal is the registry of a supervisor restarted on envDir and
// stateFile, after Recover; its environment calls are counted in n.
func restartedLocal(t *testing.T, envDir, stateFile string, n *sandboxCalls) *Registry {
	t.Helper()
	r, err := New(Config{
		Open: func(ctx context.Context, target string) (env.Environment, error) {
			e, err := local.New(local.Options{StateDir: envDir, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				return nil, err
			}
			return countingEnv{e, n}, nil
		},
		DefaultGrace: 2 * time.Second,
		Logger:       slog.New(slog.DiscardHandler),
		StateFile:    stateFile,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), generous)
		defer cancel()
		r.KillAll(ctx, KillAllOptions{Grace: 100 * time.Millisecond})
		r.Close()
	})
	rep, err := r.Recover(ctxT(t))
	require.NoError(t, err)
	require.Empty(t, rep.Notice)
	return r
}

// finishedBeforeRestart runs the commands detached to their end under a
// first registry, closes it, and returns their Infos (with Ref).
func finishedBeforeRestart(t *testing.T, envDir, stateFile string, cmds ...string) []Info {
	t.Helper()
	ctx := ctxT(t)
	r := localWithState(t, envDir, stateFile)
	_, err := r.Recover(ctx)
	require.NoError(t, err)
	var ids []string
	for _, cmd := range cmds {
		in, err := r.Start(ctx, StartOptions{Command: cmd})
		require.NoError(t, err)
		require.True(t, in.Detached, "%q was not detached", cmd)
		_, err = r.Wait(ctx, in.ID, 0)
		require.NoError(t, err)
		ids = append(ids, in.ID)
	}
	all := listed(t, r, ListOptions{All: true, WithRef: true})
	if err := r.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	byID := map[string]Info{}
	for _, in := range all {
		byID[in.ID] = in
	}
	out := make([]Info, len(ids))
	for i, id := range ids {
		out[i] = byID[id]
	}
	return out
}

// refDir is the local state directory of a detached process.
func refDir(t *testing.T, in Info) string {
	t.Helper()
	require.NotNil(t, in.Ref, "%s has no Ref", in.ID)
	var d struct {
		Dir string `json:"dir"`
	}
	require.NoError(t, json.Unmarshal(in.Ref.Data, &d))
	require.NotEmpty(t, d.Dir)
	return d.Dir
}

// TestRecoverFinishedReadsNothing: a restart reads nothing of a finished
// process from its sandbox, nor do Get, List, Wait and a Poll at the end
// of the output; the first Log or Poll that needs bytes reads them back
// once, complete, also when several ask at the same moment.
func TestRecoverFinishedReadsNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	envDir, stateFile := t.TempDir(), filepath.Join(t.TempDir(), "state.json")
	// More than one read's worth (copyOutput starts at 4 KiB).
	big := seqOutput(5000)
	procs := finishedBeforeRestart(t, envDir, stateFile, "seq 1 5000", "echo one; echo two; exit 4", "true")
	seqP, twoP, emptyP := procs[0], procs[1], procs[2]
	require.Equal(t, int64(len(big)), seqP.OutputBytes)

	var n sandboxCalls
	r := restartedLocal(t, envDir, stateFile, &n)
	ctx := ctxT(t)
	calls := func() string { return fmt.Sprintf("%d attaches, %d outputs", n.attaches.Load(), n.outputs.Load()) }

	all := listed(t, r, ListOptions{All: true})
	require.Len(t, all, 3)
	for i, in := range all {
		assert.Equal(t, procs[i].ID, in.ID)
		assert.Equal(t, procs[i].State, in.State)
		assert.Equal(t, procs[i].Status, in.Status)
		assert.Equal(t, procs[i].OutputBytes, in.OutputBytes, "output_bytes of %s from the checkpoint", in.ID)
		assert.True(t, procs[i].EndedAt.Equal(in.EndedAt))
	}
	in, err := r.Wait(ctx, twoP.ID, 0)
	require.NoError(t, err)
	assert.Equal(t, 4, in.Status.Code)
	_, err = r.Get(ctx, seqP.ID)
	require.NoError(t, err)
	pr, err := r.Poll(ctx, seqP.ID, seqP.OutputBytes)
	require.NoError(t, err)
	assert.Empty(t, pr.Output)
	assert.Equal(t, seqP.OutputBytes, pr.Next)
	assert.Equal(t, "0 attaches, 0 outputs", calls(), "restart, List, Get, Wait and a Poll at the end must not touch the sandbox")

	// Several readers at once: one read-back, everyone gets all of it.
	var wg sync.WaitGroup
	got := make([]string, 8)
	for i := range got {
		wg.Go(func() {
			if i%2 == 0 {
				pr, err := r.Poll(ctx, seqP.ID, 0)
				assert.NoError(t, err)
				got[i] = string(pr.Output)
				return
			}
			lr, err := r.Log(ctx, seqP.ID, LogOptions{Limit: 10000})
			assert.NoError(t, err)
			got[i] = strings.Join(lr.Lines, "\n") + "\n"
		})
	}
	wg.Wait()
	for i, s := range got {
		if s != big {
			t.Fatalf("reader %d got %d bytes, want %d", i, len(s), len(big))
		}
	}
	assert.Equal(t, "1 attaches, 1 outputs", calls())
	pr, err = r.Poll(ctx, seqP.ID, int64(len(big))-5)
	require.NoError(t, err)
	assert.Equal(t, "5000\n", string(pr.Output))
	assert.Equal(t, "1 attaches, 1 outputs", calls(), "output read back once")

	lr, err := r.Log(ctx, twoP.ID, LogOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"one", "two"}, lr.Lines)
	assert.Equal(t, int64(8), lr.OutputBytes)
	// Nothing to read for a process that wrote nothing.
	lr, err = r.Log(ctx, emptyP.ID, LogOptions{})
	require.NoError(t, err)
	assert.Empty(t, lr.Lines)
	assert.Equal(t, "2 attaches, 2 outputs", calls())

	// The checkpoint the restarted registry writes keeps the sizes,
	// read back or not.
	require.NoError(t, r.Checkpoint())
	for _, rec := range readCheckpoint(t, stateFile).Processes {
		for _, p := range procs {
			if rec.ID == p.ID {
				assert.Equal(t, p.OutputBytes, rec.OutputBytes, "output_bytes of %s after the restart", p.ID)
			}
		}
	}
}

// TestRecoverFinishedOutputGone: when the sandbox lost a finished
// process's output while no supervisor ran, ps and wait still answer from
// the checkpoint, and logs says what was wrong (every time, without
// asking the sandbox again); Remove still works.
func TestRecoverFinishedOutputGone(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	envDir, stateFile := t.TempDir(), filepath.Join(t.TempDir(), "state.json")
	procs := finishedBeforeRestart(t, envDir, stateFile, "echo lost-output; exit 2", "echo whole-dir-gone")
	logGone, dirGone := procs[0], procs[1]
	require.NoError(t, os.Rename(filepath.Join(refDir(t, logGone), "log"), filepath.Join(t.TempDir(), "log")))
	require.NoError(t, os.RemoveAll(refDir(t, dirGone)))

	var n sandboxCalls
	r := restartedLocal(t, envDir, stateFile, &n)
	ctx := ctxT(t)
	in, err := r.Wait(ctx, logGone.ID, 0)
	require.NoError(t, err)
	assert.Equal(t, StateExited, in.State)
	assert.Equal(t, 2, in.Status.Code)
	assert.Equal(t, int64(len("lost-output\n")), in.OutputBytes)
	require.Len(t, listed(t, r, ListOptions{All: true}), 2)

	for _, p := range procs {
		_, err = r.Log(ctx, p.ID, LogOptions{})
		require.ErrorIs(t, err, env.ErrNotFound, "Log of %s", p.ID)
		assert.Contains(t, err.Error(), p.ID)
		assert.Contains(t, err.Error(), "no longer holds it")
		_, err = r.Poll(ctx, p.ID, 0)
		require.ErrorIs(t, err, env.ErrNotFound, "Poll of %s", p.ID)
	}
	before := n.attaches.Load() + n.outputs.Load()
	_, err = r.Log(ctx, logGone.ID, LogOptions{})
	require.ErrorIs(t, err, env.ErrNotFound)
	assert.Equal(t, before, n.attaches.Load()+n.outputs.Load(), "a lost output is not asked for again")

	// Remove deletes what is left in the sandbox, or finds nothing left.
	require.NoError(t, r.Remove(ctx, logGone.ID))
	_, err = os.Stat(refDir(t, logGone))
	require.ErrorIs(t, err, os.ErrNotExist)
	require.NoError(t, r.Remove(ctx, dirGone.ID))
	assert.Empty(t, listed(t, r, ListOptions{All: true}))
}

// TestRecoverFinishedRemoveAttaches: a finished process restored without
// being attached still has its sandbox state deleted by Remove and by
// pruning.
func TestRecoverFinishedRemoveAttaches(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	envDir, stateFile := t.TempDir(), filepath.Join(t.TempDir(), "state.json")
	procs := finishedBeforeRestart(t, envDir, stateFile, "echo removed", "echo pruned")
	var n sandboxCalls
	r, err := New(Config{
		Open: func(ctx context.Context, target string) (env.Environment, error) {
			e, err := local.New(local.Options{StateDir: envDir, Logger: slog.New(slog.DiscardHandler)})
			return countingEnv{e, &n}, err
		},
		Logger:      slog.New(slog.DiscardHandler),
		StateFile:   stateFile,
		FinishedTTL: time.Hour,
	})
	require.NoError(t, err)
	defer r.Close()
	_, err = r.Recover(ctxT(t))
	require.NoError(t, err)
	require.NoError(t, r.Remove(ctxT(t), procs[0].ID))
	_, err = os.Stat(refDir(t, procs[0]))
	require.ErrorIs(t, err, os.ErrNotExist, "Remove left the sandbox state")

	// Pruning: make the process expire. The sandbox state goes in the
	// background (attaching may be a round trip; List does not wait).
	r.mu.Lock()
	p := r.procs[procs[1].ID]
	r.mu.Unlock()
	p.endedAt.Store(time.Now().Add(-2 * time.Hour).UnixNano())
	assert.Empty(t, listed(t, r, ListOptions{All: true}))
	require.Eventually(t, func() bool { _, err := os.Stat(refDir(t, procs[1])); return os.IsNotExist(err) },
		generous, poll, "waiting for pruning to delete the sandbox state")
	assert.Equal(t, int64(0), n.outputs.Load(), "removal read output")
}

// TestRecoverFinishedPruneUnreachable: pruning finished processes whose
// backend cannot be reached after the restart does not hold List.
func TestRecoverFinishedPruneUnreachable(t *testing.T) {
	stateFile := filepath.Join(t.TempDir(), "state.json")
	old := time.Now().Add(-time.Hour)
	cf := checkpointFile{Version: checkpointVersion}
	for i := range 5 {
		cf.Processes = append(cf.Processes, checkpointRecord{
			ID: fmt.Sprintf("proc_00000000000%d", i), Backend: "ssh://unreachable", Command: "make", State: StateExited,
			Status: &env.ExitStatus{}, CreatedAt: old, EndedAt: old, OutputBytes: 10, Detached: true,
			Ref: &env.Ref{Env: "ssh://unreachable", Data: json.RawMessage(`{}`)},
		})
	}
	data, err := json.Marshal(cf)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(stateFile, data, 0o600))
	var opens atomic.Int64
	r, err := New(Config{
		Open: func(ctx context.Context, target string) (env.Environment, error) {
			opens.Add(1)
			<-ctx.Done() // a host that never answers
			return nil, ctx.Err()
		},
		Logger:      slog.New(slog.DiscardHandler),
		StateFile:   stateFile,
		FinishedTTL: time.Minute,
	})
	require.NoError(t, err)
	rep, err := r.Recover(ctxT(t))
	require.NoError(t, err)
	assert.Equal(t, 5, rep.Restored[StateExited])
	assert.Equal(t, int64(0), opens.Load(), "Recover opened the backend of finished processes")
	t0 := time.Now()
	assert.Empty(t, listed(t, r, ListOptions{All: true}))
	assert.Less(t, time.Since(t0), time.Second, "List waited for the unreachable backend")
	require.Eventually(t, func() bool { return opens.Load() > 0 }, generous, poll, "pruning never tried to remove the sandbox state")
	// Close ends the background removal at once.
	t0 = time.Now()
	require.NoError(t, r.Close())
	assert.Less(t, time.Since(t0), 5*time.Second)
}

// TestRecoverFinishedTreeStillRunning: a process whose leader had exited
// with part of its tree running is followed again after a restart: its
// output is read back, and what the leftover writes afterwards is
// appended to it.
func TestRecoverFinishedTreeStillRunning(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	ctx := ctxT(t)
	envDir, stateFile := t.TempDir(), filepath.Join(t.TempDir(), "state.json")
	flags := t.TempDir()
	flag := filepath.Join(flags, "go")
	r1 := localWithState(t, envDir, stateFile)
	_, err := r1.Recover(ctx)
	require.NoError(t, err)
	// The leftover also ends when the test's directory is gone, so that
	// a failed run leaves nothing looping.
	in, err := r1.Start(ctx, StartOptions{Command: fmt.Sprintf(
		"echo first; (while [ ! -e %s ] && [ -d %s ]; do sleep 0.02; done; echo late) & echo leader-done", flag, flags)})
	require.NoError(t, err)
	in, err = r1.Wait(ctx, in.ID, 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { g, _ := r1.Get(ctx, in.ID); return g.Leftover > 0 }, generous, poll,
		"waiting for the leftover to be counted")
	require.NoError(t, r1.Checkpoint())
	r1.Close()

	var n sandboxCalls
	r2 := restartedLocal(t, envDir, stateFile, &n)
	g, err := r2.Get(ctx, in.ID)
	require.NoError(t, err)
	require.True(t, g.TreeRunning, "%+v", g)
	require.NoError(t, os.WriteFile(flag, nil, 0o600))
	_, err = r2.WaitTree(ctx, in.ID, 0)
	require.NoError(t, err)
	pr, err := r2.Poll(ctx, in.ID, 0)
	require.NoError(t, err)
	assert.Equal(t, "first\nleader-done\nlate\n", string(pr.Output))
}
