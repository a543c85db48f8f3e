//go:build linux

package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
	"github.com/corralhq/corral/internal/testing/proctest"
)

// gatedEnv wraps the local environment: Start and Attach wait for their
// gate (when set), count the calls in flight, and afterStart runs once a
// Start returned. It is no env.TagFinder; taggedEnv is.
type gatedEnv struct {
	env.Environment
	startGate, attachGate chan struct{}
	afterStart            func()

	starts   atomic.Int32
	inflight atomic.Int32
	maxAtt   atomic.Int32
}

func (g *gatedEnv) Start(ctx context.Context, spec env.Spec) (env.Process, error) {
	g.starts.Add(1)
	if g.startGate != nil {
		<-g.startGate
	}
	p, err := g.Environment.Start(ctx, spec)
	if g.afterStart != nil {
		g.afterStart()
	}
	return p, err
}

func (g *gatedEnv) Attach(ctx context.Context, ref env.Ref) (env.Process, error) {
	n := g.inflight.Add(1)
	defer g.inflight.Add(-1)
	for {
		m := g.maxAtt.Load()
		if n <= m || g.maxAtt.CompareAndSwap(m, n) {
			break
		}
	}
	if g.attachGate != nil {
		select {
		case <-g.attachGate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.Environment.Attach(ctx, ref)
}

type taggedEnv struct{ *gatedEnv }

func (t taggedEnv) Tagged(ctx context.Context, tags []string) (map[string][]env.Process, error) {
	return t.Environment.(env.TagFinder).Tagged(ctx, tags)
}

// gatedRegistry is a registry with a state file on the local environment
// of envDir, wrapped in g (as a TagFinder when tagged).
func gatedRegistry(t *testing.T, envDir, stateFile string, g *gatedEnv, tagged bool) *Registry {
	t.Helper()
	if testing.Short() {
		t.Skip("real processes")
	}
	r, err := New(Config{
		Open: func(ctx context.Context, target string) (env.Environment, error) {
			e, err := local.New(local.Options{StateDir: envDir, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				return nil, err
			}
			g.Environment = e
			if tagged {
				return taggedEnv{g}, nil
			}
			return g, nil
		},
		DefaultGrace: 2 * time.Second,
		Logger:       slog.New(slog.DiscardHandler),
		StateFile:    stateFile,
	})
	require.NoError(t, err)
	return r
}

// recordOf returns the record of id in the state file, if any.
func recordOf(t *testing.T, stateFile, id string) (checkpointRecord, bool) {
	t.Helper()
	data, err := os.ReadFile(stateFile)
	if err != nil {
		return checkpointRecord{}, false
	}
	var f checkpointFile
	require.NoError(t, json.Unmarshal(data, &f))
	for _, rec := range f.Processes {
		if rec.ID == id {
			return rec, true
		}
	}
	return checkpointRecord{}, false
}

// editRecords rewrites the state file, passing every record through edit.
func editRecords(t *testing.T, stateFile string, edit func(*checkpointRecord)) {
	t.Helper()
	data, err := os.ReadFile(stateFile)
	require.NoError(t, err)
	var f checkpointFile
	require.NoError(t, json.Unmarshal(data, &f))
	for i := range f.Processes {
		edit(&f.Processes[i])
	}
	data, err = json.Marshal(f)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(stateFile, data, 0o600))
}

// TestStartRecordedBeforeItRuns: the process is in the state file, as
// starting, before the environment is asked to start it, and recorded
// running once Start returns.
func TestStartRecordedBeforeItRuns(t *testing.T) {
	envDir, stateFile := t.TempDir(), filepath.Join(t.TempDir(), "state.json")
	g := &gatedEnv{startGate: make(chan struct{})}
	r := gatedRegistry(t, envDir, stateFile, g, true)
	defer r.Close()
	_, err := r.Recover(ctxT(t))
	require.NoError(t, err)
	m := marker()
	proctest.KillOnCleanup(t, m)
	done := make(chan Info, 1)
	go func() {
		in, err := r.Start(context.Background(), StartOptions{Command: "sleep " + m})
		assert.NoError(t, err)
		done <- in
	}()
	require.Eventually(t, func() bool { return g.starts.Load() == 1 }, generous, poll, "Start never reached the environment")
	all, err := r.List(ctxT(t), ListOptions{All: true})
	require.NoError(t, err)
	require.Len(t, all, 1)
	rec, ok := recordOf(t, stateFile, all[0].ID)
	require.True(t, ok, "the environment was asked to start a process the state file does not hold")
	assert.Equal(t, StateStarting, rec.State)
	close(g.startGate)
	in := <-done
	rec, ok = recordOf(t, stateFile, in.ID)
	require.True(t, ok)
	assert.Equal(t, StateRunning, rec.State, "Start returned before the state file recorded it running")
	assert.NotNil(t, rec.Ref)
	_, err = r.Kill(ctxT(t), in.ID, KillOptions{Force: true})
	require.NoError(t, err)
}

// TestUnconfirmedRecordedStarting: a process that runs but whose Start has
// not answered its caller yet is checkpointed as starting, with its Ref.
func TestUnconfirmedRecordedStarting(t *testing.T) {
	p := &proc{procLife: procLife{state: StateRunning, unconfirmed: true, ref: &env.Ref{Env: "local"}}, procOutput: procOutput{buf: newBuffer(1024, 256)}}
	rec := p.recordLocked()
	assert.Equal(t, StateStarting, rec.State)
	assert.NotNil(t, rec.Ref)
	p.unconfirmed = false
	assert.Equal(t, StateRunning, p.recordLocked().State)
	p.state, p.recoverFrom = StateRecovering, StateRunning
	assert.Equal(t, StateRunning, p.recordLocked().State, "a process still recovering is recorded as what it was recovered from")
}

// TestRecoverEndsInterruptedStarts: a restart finds records of starts the
// previous registry never confirmed (it died during them). What they left
// running is killed with its tree — found through the Ref, or by tag when
// the record has none — its state in the sandbox removed, and the record
// restored failed with the reason; a confirmed process is untouched. A
// backend that cannot look by tag leaves such a start reported as
// possibly still running.
func TestRecoverEndsInterruptedStarts(t *testing.T) {
	for _, tagged := range []bool{true, false} {
		t.Run(fmt.Sprintf("tagfinder=%v", tagged), func(t *testing.T) {
			envDir, stateFile := t.TempDir(), filepath.Join(t.TempDir(), "state.json")
			r1 := gatedRegistry(t, envDir, stateFile, &gatedEnv{}, tagged)
			_, err := r1.Recover(ctxT(t))
			require.NoError(t, err)
			mA, mB, mC := marker(), marker(), marker()
			for _, m := range []string{mA, mB, mC} {
				proctest.KillOnCleanup(t, m)
			}
			ids := map[string]Info{}
			for _, m := range []string{mA, mB, mC} {
				in, err := r1.Start(ctxT(t), StartOptions{Command: "sleep " + m + " & sleep " + m + "; wait"})
				require.NoError(t, err)
				ids[m] = in
			}
			// D: a foreground Run, which its caller watched start.
			mD := marker()
			proctest.KillOnCleanup(t, mD)
			startedD := make(chan Info, 1)
			runDone := make(chan struct{})
			go func() {
				defer close(runDone)
				r1.Run(context.Background(), RunOptions{StartOptions: StartOptions{Command: "sleep " + mD + " & sleep " + mD + "; wait"},
					Started: func(in Info) { startedD <- in }})
			}()
			ids[mD] = <-startedD
			proctest.WaitRunning(t, mA, 2)
			proctest.WaitRunning(t, mB, 2)
			proctest.WaitRunning(t, mC, 2)
			proctest.WaitRunning(t, mD, 2)
			require.NoError(t, r1.Close()) // a crash, as far as detached processes go
			<-runDone
			refB, ok := recordOf(t, stateFile, ids[mB].ID)
			require.True(t, ok)
			// B died in Start after the environment answered (it has its
			// Ref), C before (none).
			editRecords(t, stateFile, func(rec *checkpointRecord) {
				switch rec.ID {
				case ids[mB].ID:
					rec.State = StateStarting
				case ids[mC].ID, ids[mD].ID:
					rec.State, rec.Ref, rec.PID = StateStarting, nil, 0
				}
			})

			r2 := gatedRegistry(t, envDir, stateFile, &gatedEnv{}, tagged)
			defer func() {
				r2.KillAll(ctxT(t), KillAllOptions{Signal: env.SIGKILL})
				r2.Close()
			}()
			rep, err := r2.Recover(ctxT(t))
			require.NoError(t, err)
			assert.Equal(t, 1, rep.Restored[StateRunning])
			if tagged {
				assert.Equal(t, 2, rep.Restored[StateFailed])
				assert.Equal(t, 1, rep.Restored[StateKilled])
			} else {
				assert.Equal(t, 3, rep.Restored[StateFailed])
			}
			assert.Equal(t, 3, rep.Interrupted)

			a, err := r2.Get(ctxT(t), ids[mA].ID)
			require.NoError(t, err)
			assert.Equal(t, StateRunning, a.State)
			assert.Len(t, sleepers(mA), 2, "a confirmed process was touched")

			b, err := r2.Get(ctxT(t), ids[mB].ID)
			require.NoError(t, err)
			assert.Equal(t, StateFailed, b.State)
			assert.Contains(t, b.Reason, "stopped during this start")
			assert.Contains(t, b.Reason, "killed (")
			assert.Empty(t, sleepers(mB), "an interrupted start found by its Ref still runs")
			var rd struct{ Dir string }
			require.NoError(t, json.Unmarshal(refB.Ref.Data, &rd))
			assert.NoDirExists(t, rd.Dir, "the interrupted start's state was not removed")

			c, err := r2.Get(ctxT(t), ids[mC].ID)
			require.NoError(t, err)
			assert.Equal(t, StateFailed, c.State)
			if tagged {
				assert.Contains(t, c.Reason, "killed (")
				assert.Empty(t, sleepers(mC), "an interrupted start found by its tag still runs")
			} else {
				assert.Contains(t, c.Reason, "may still run")
				assert.Len(t, sleepers(mC), 2)
			}
			assert.Less(t, len(c.Reason), 400, "reason too long: %q", c.Reason)

			d, err := r2.Get(ctxT(t), ids[mD].ID)
			require.NoError(t, err)
			if tagged {
				// Found by its tag: the Run's caller went with the
				// supervisor, so it is killed as an orphan.
				assert.Equal(t, StateKilled, d.State)
				assert.Equal(t, orphanedForegroundReason, d.Reason)
				assert.Empty(t, sleepers(mD))
			} else {
				assert.Equal(t, StateFailed, d.State)
				assert.Contains(t, d.Reason, "may still run")
			}
		})
	}
}

// TestStartRefusedWithoutStateFile: a start whose record cannot be written
// runs nothing and registers nothing, and says what to do; one whose
// confirmation cannot be written is killed again. Once the file can be
// written, starts work.
func TestStartRefusedWithoutStateFile(t *testing.T) {
	envDir, stateDir := t.TempDir(), t.TempDir()
	stateFile := filepath.Join(stateDir, "state.json")
	g := &gatedEnv{}
	r := gatedRegistry(t, envDir, stateFile, g, true)
	defer func() {
		r.KillAll(ctxT(t), KillAllOptions{Signal: env.SIGKILL})
		r.Close()
	}()
	_, err := r.Recover(ctxT(t))
	require.NoError(t, err)
	m := marker()
	proctest.KillOnCleanup(t, m)

	require.NoError(t, os.RemoveAll(stateDir))
	_, err = r.Start(ctxT(t), StartOptions{Command: "sleep " + m})
	var sfe *StateFileError
	require.ErrorAs(t, err, &sfe)
	assert.Contains(t, err.Error(), "nothing was started")
	assert.Less(t, len(err.Error()), 400)
	assert.Zero(t, g.starts.Load(), "the environment was asked to start a process without a record")
	all, err := r.List(ctxT(t), ListOptions{All: true})
	require.NoError(t, err)
	assert.Empty(t, all, "a refused start is tracked")

	// The record is written, then the file goes away while the process
	// starts: it is killed again.
	require.NoError(t, os.Mkdir(stateDir, 0o700))
	g.afterStart = func() { os.RemoveAll(stateDir) }
	_, err = r.Start(ctxT(t), StartOptions{Command: "sleep " + m})
	require.ErrorAs(t, err, &sfe)
	assert.Empty(t, sleepers(m), "a process whose start could not be confirmed still runs")
	all, err = r.List(ctxT(t), ListOptions{All: true})
	require.NoError(t, err)
	assert.Empty(t, all)

	g.afterStart = nil
	require.NoError(t, os.Mkdir(stateDir, 0o700))
	in, err := r.Start(ctxT(t), StartOptions{Command: "sleep " + m})
	require.NoError(t, err)
	assert.Equal(t, StateRunning, in.State)
}

// TestStartKey: a Start repeated with the Key of a process returns that
// process, also after a restart; a start that was interrupted (and ended
// by the restart) is started anew; a Key is validated.
func TestStartKey(t *testing.T) {
	envDir, stateFile := t.TempDir(), filepath.Join(t.TempDir(), "state.json")
	m := marker()
	proctest.KillOnCleanup(t, m)
	open := func() *Registry {
		r := gatedRegistry(t, envDir, stateFile, &gatedEnv{}, true)
		_, err := r.Recover(ctxT(t))
		require.NoError(t, err)
		return r
	}
	r := open()
	opts := StartOptions{Command: "sleep " + m, Key: "cli-0123abcd"}
	a, err := r.Start(ctxT(t), opts)
	require.NoError(t, err)
	assert.False(t, a.Reused)
	again, err := r.Start(ctxT(t), opts)
	require.NoError(t, err)
	assert.True(t, again.Reused)
	assert.Equal(t, a.ID, again.ID)
	other, err := r.Start(ctxT(t), StartOptions{Command: "sleep " + m, Key: "cli-other"})
	require.NoError(t, err)
	assert.NotEqual(t, a.ID, other.ID)
	_, err = r.Start(ctxT(t), StartOptions{Command: "sleep " + m, Key: "bad key"})
	assert.ErrorIs(t, err, ErrInvalidOptions)
	require.NoError(t, r.Close())

	r = open()
	again, err = r.Start(ctxT(t), opts)
	require.NoError(t, err)
	assert.True(t, again.Reused, "the key was lost in the restart")
	assert.Equal(t, a.ID, again.ID)
	require.NoError(t, r.Close())

	editRecords(t, stateFile, func(rec *checkpointRecord) {
		if rec.ID == a.ID {
			rec.State = StateStarting
		}
	})
	r = open()
	defer func() {
		r.KillAll(ctxT(t), KillAllOptions{Signal: env.SIGKILL})
		r.Close()
	}()
	old, err := r.Get(ctxT(t), a.ID)
	require.NoError(t, err)
	require.Equal(t, StateFailed, old.State)
	fresh, err := r.Start(ctxT(t), opts)
	require.NoError(t, err)
	assert.False(t, fresh.Reused)
	assert.NotEqual(t, a.ID, fresh.ID, "an interrupted start was returned instead of started anew")
	assert.Equal(t, StateRunning, fresh.State)
}

// TestRecoverServesWhileRecovering: StartRecover returns before any Attach
// answered; the processes are listed recovering meanwhile (and kept in
// the state file as running), a Kill waits for the re-attach, and once
// the Attach calls return they run again. The Attach calls run in
// parallel: all of them were in flight at once.
func TestRecoverServesWhileRecovering(t *testing.T) {
	const n = 6
	envDir, stateFile := t.TempDir(), filepath.Join(t.TempDir(), "state.json")
	r1 := gatedRegistry(t, envDir, stateFile, &gatedEnv{}, true)
	_, err := r1.Recover(ctxT(t))
	require.NoError(t, err)
	m := marker()
	proctest.KillOnCleanup(t, m)
	var ids []string
	for range n {
		in, err := r1.Start(ctxT(t), StartOptions{Command: "sleep " + m})
		require.NoError(t, err)
		ids = append(ids, in.ID)
	}
	require.NoError(t, r1.Close())

	g := &gatedEnv{attachGate: make(chan struct{})}
	r2 := gatedRegistry(t, envDir, stateFile, g, true)
	defer func() {
		r2.KillAll(ctxT(t), KillAllOptions{Signal: env.SIGKILL})
		r2.Close()
	}()
	rc, err := r2.StartRecover(ctxT(t))
	require.NoError(t, err)
	assert.Equal(t, n, rc.Report().Recovering)
	list, err := r2.List(ctxT(t), ListOptions{})
	require.NoError(t, err)
	require.Len(t, list, n)
	for _, in := range list {
		assert.Equal(t, StateRecovering, in.State)
	}
	require.Eventually(t, func() bool { return g.inflight.Load() == n }, generous, poll, "the Attach calls are not made in parallel")
	require.NoError(t, r2.Checkpoint())
	rec, ok := recordOf(t, stateFile, ids[0])
	require.True(t, ok)
	assert.Equal(t, StateRunning, rec.State, "a process still recovering was recorded as such")

	killed := make(chan error, 1)
	go func() {
		_, err := r2.Kill(context.Background(), ids[0], KillOptions{Force: true})
		killed <- err
	}()
	select {
	case err := <-killed:
		t.Fatalf("Kill of a process still recovering returned before its re-attach: %v", err)
	case <-rc.Done():
		t.Fatal("the recovery ended with its Attach calls blocked")
	case <-time.After(50 * time.Millisecond):
	}
	close(g.attachGate)
	rep, err := rc.Wait(ctxT(t))
	require.NoError(t, err)
	assert.Equal(t, n, rep.Restored[StateRunning])
	assert.Zero(t, rep.Recovering)
	require.NoError(t, <-killed)
	in, err := r2.Get(ctxT(t), ids[0])
	require.NoError(t, err)
	assert.Equal(t, StateKilled, in.State)
	in, err = r2.Get(ctxT(t), ids[1])
	require.NoError(t, err)
	assert.Equal(t, StateRunning, in.State)
}
