package registry

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

// stateFileV1 is a state file as version 1 writes it. It is a literal on
// purpose: the file outlives a release, so a change of the record's JSON
// names (or of Info's, should the record ever follow it again) must fail
// here rather than strand the processes of users who upgrade.
const stateFileV1 = `{
 "version": 1,
 "saved_at": "2026-11-20T10:00:00Z",
 "processes": [
  {
   "id": "proc_0123456789ab",
   "backend": "local",
   "command": "make test",
   "dir": "/src",
   "labels": {"job": "ci"},
   "state": "killed",
   "pid": 4242,
   "stdin": true,
   "notify": true,
   "created_at": "2026-11-20T09:00:00Z",
   "started_at": "2026-11-20T09:00:01Z",
   "ended_at": "2026-11-20T09:30:00Z",
   "status": {"code": -1, "signal": "TERM"},
   "output_bytes": 1234,
   "reason": "killed by request",
   "timed_out": "idle_timeout",
   "watch_disabled": true,
   "watch": ["FAIL"],
   "kill_reason": "killed"
  },
  {
   "id": "proc_0123456789ac",
   "backend": "local",
   "command": "sleep 100",
   "state": "running",
   "pid": 77,
   "detached": true,
   "created_at": "2026-11-20T09:10:00Z",
   "started_at": "2026-11-20T09:10:01Z",
   "output_bytes": 0
  }
 ]
}
`

func TestRecoverStateFileV1(t *testing.T) {
	stateFile := filepath.Join(t.TempDir(), "state.json")
	require.NoError(t, os.WriteFile(stateFile, []byte(stateFileV1), 0o600))
	r := newFixture(t, func(c *Config) {
		c.StateFile = stateFile
		c.FinishedTTL = 100 * 365 * 24 * time.Hour // the records are old
	}).r
	rep, err := r.Recover(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 0, rep.Skipped)
	assert.Equal(t, 1, rep.Restored[StateKilled])
	// A running process without a Ref cannot be re-attached.
	assert.Equal(t, 1, rep.Restored[StateLost])

	in, err := r.Get(t.Context(), "proc_0123456789ab")
	require.NoError(t, err)
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return tm
	}
	assert.Equal(t, Info{
		ID: "proc_0123456789ab", Backend: "local", Command: "make test", Dir: "/src",
		Labels: map[string]string{"job": "ci"}, State: StateKilled, PID: 4242, Stdin: true, Notify: true,
		CreatedAt: at("2026-11-20T09:00:00Z"), StartedAt: at("2026-11-20T09:00:01Z"), EndedAt: at("2026-11-20T09:30:00Z"),
		Status:      &env.ExitStatus{Code: -1, Signal: env.SIGTERM},
		OutputBytes: 1234, // recorded: the output is not read back for Get
		Reason:      "killed by request", TimedOut: TimedOutIdle, WatchDisabled: true,
	}, in)
	// It was not detached, so its output did not survive: reading it says
	// so, while a cursor at its end needs nothing.
	_, err = r.Log(context.Background(), in.ID, LogOptions{})
	require.ErrorIs(t, err, env.ErrUnsupported)
	assert.Contains(t, err.Error(), "not started detached")
	pr, err := r.Poll(context.Background(), in.ID, 1234)
	require.NoError(t, err)
	assert.Equal(t, int64(1234), pr.Next)
	assert.Empty(t, pr.Output)

	lost, err := r.Get(t.Context(), "proc_0123456789ac")
	require.NoError(t, err)
	assert.Equal(t, StateLost, lost.State)
	assert.True(t, lost.Detached)
}

// TestCheckpointRecordNames pins the state file's field names: renaming
// one breaks every file written before, so it needs a new version and a
// reader for the old one.
func TestCheckpointRecordNames(t *testing.T) {
	rec := checkpointRecord{
		ID: "proc_0123456789ab", Backend: "local", Command: "x", Dir: "/", Labels: map[string]string{"a": "b"},
		State: StateExited, PID: 1, PTY: true, Stdin: true, Detached: true, Notify: true,
		CreatedAt: time.Unix(1, 0), StartedAt: time.Unix(2, 0), EndedAt: time.Unix(3, 0),
		Status: &env.ExitStatus{Code: 1}, OutputBytes: 1, Reason: "r", TimedOut: TimedOutTimeout,
		Ref: &env.Ref{Env: "local", Data: json.RawMessage(`{}`)}, WatchDisabled: true, Leftover: 1, TreeRunning: true,
		Watch: []string{"w"}, WatchRegex: []string{"r"}, PTYSize: &env.WindowSize{Rows: 1, Cols: 1}, KillReason: StateKilled,
		Name: "web", EnvDigest: "d", Ready: &ReadyOptions{Port: 1}, ReadyAt: time.Unix(4, 0), TTL: 1, IdleTimeout: 1,
	}
	b, err := json.Marshal(rec)
	require.NoError(t, err)
	var fields map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &fields))
	var names []string
	for k := range fields {
		names = append(names, k)
	}
	slices.Sort(names)
	assert.Equal(t, []string{
		"backend", "command", "created_at", "detached", "dir", "ended_at", "env_digest", "id", "idle_timeout",
		"kill_reason", "labels", "leftover", "name", "notify", "output_bytes", "pid", "pty", "pty_size",
		"ready", "ready_at", "reason", "ref", "started_at", "state", "status", "stdin", "timed_out",
		"tree_running", "ttl", "watch", "watch_disabled", "watch_regex",
	}, names)
}
