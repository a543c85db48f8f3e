//go:build linux

package registry

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

// waitMarked polls Info until the process is marked waiting for input.
func waitMarked(t *testing.T, r *Registry, id string, within time.Duration) *WaitingInput {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		in, err := r.Get(context.Background(), id)
		require.NoError(t, err)
		if in.WaitingInput != nil {
			return in.WaitingInput
		}
		time.Sleep(50 * time.Millisecond)
	}
	in, _ := r.Get(context.Background(), id)
	require.FailNowf(t, "not marked", "process %s was not marked waiting for input within %v: %+v", id, within, in)
	return nil
}

// TestInputWaitMarksAPrompt: a PTY command that asks for a line is marked
// waiting_input (kind line, its prompt) after the quiet spell, with one
// waiting_input event; ps says so; an answer clears the mark and the
// command goes on.
func TestInputWaitMarksAPrompt(t *testing.T) {
	r := newLocal(t, func(c *Config) { c.InputQuiet = 300 * time.Millisecond })
	sub := r.Subscribe()
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	info, err := r.Start(ctx, StartOptions{Command: `printf 'Project name? '; read name; echo "made $name"; sleep 5`, PTY: &env.WindowSize{Rows: 24, Cols: 80}, Stdin: true})
	require.NoError(t, err)

	w := waitMarked(t, r, info.ID, 5*time.Second)
	assert.Equal(t, env.InputLine, w.Kind)
	assert.Equal(t, "Project name? ", w.Prompt)
	in, err := r.Get(context.Background(), info.ID)
	require.NoError(t, err)
	assert.Equal(t, "running, waiting for input (line)", in.listState())

	var ev Event
	for ev.Type != EventWaitingInput {
		ev, err = sub.Next(ctx)
		require.NoError(t, err)
	}
	assert.Equal(t, info.ID, ev.ID)
	require.NotNil(t, ev.WaitingInput)
	assert.Equal(t, "Project name? ", ev.WaitingInput.Prompt)
	assert.Contains(t, ev.Summary, "waits for input (line): Project name?")

	require.NoError(t, r.Submit(ctx, info.ID, "corral"))
	in, err = r.Get(context.Background(), info.ID)
	require.NoError(t, err)
	assert.Nil(t, in.WaitingInput, "an answer clears the mark at once")
	require.Eventually(t, func() bool {
		lr, err := r.Log(ctx, info.ID, LogOptions{Strip: true})
		return err == nil && strings.Contains(strings.Join(lr.Lines, "\n"), "made corral")
	}, 5*time.Second, 50*time.Millisecond, "the command went on with the answer")
	// Busy in sleep now: not waiting, however long it is quiet.
	time.Sleep(time.Second + 3*inputTick)
	in, err = r.Get(context.Background(), info.ID)
	require.NoError(t, err)
	assert.Nil(t, in.WaitingInput, "a sleeping command is not waiting for input")
}

// TestInputWaitNotForSleep: a quiet command that reads nothing is never
// marked, on a PTY or with stdin open.
func TestInputWaitNotForSleep(t *testing.T) {
	r := newLocal(t, func(c *Config) { c.InputQuiet = 200 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	a, err := r.Start(ctx, StartOptions{Command: "sleep 30", PTY: &env.WindowSize{Rows: 24, Cols: 80}})
	require.NoError(t, err)
	b, err := r.Start(ctx, StartOptions{Command: "sleep 30", Stdin: true})
	require.NoError(t, err)
	time.Sleep(2 * time.Second)
	for _, id := range []string{a.ID, b.ID} {
		in, err := r.Get(context.Background(), id)
		require.NoError(t, err)
		assert.Nil(t, in.WaitingInput, "%s (%s) marked waiting", id, in.Command)
	}
}

// TestRunYieldsOnInput: a foreground run with stdin returns as soon as
// its command waits for input, leaving it running; submitting the answer
// lets it finish.
func TestRunYieldsOnInput(t *testing.T) {
	r := newLocal(t, func(c *Config) { c.InputQuiet = 300 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	start := time.Now()
	rr, err := r.Run(ctx, RunOptions{StartOptions: StartOptions{Command: `echo "Ok to proceed? (y)"; read a; echo "got $a"`, Stdin: true},
		Timeout: time.Minute, YieldOnInput: true})
	require.NoError(t, err)
	require.True(t, rr.Yielded, "the run yields at the prompt: %+v", rr.Info)
	require.NotNil(t, rr.WaitingInput)
	assert.Equal(t, env.InputPipe, rr.WaitingInput.Kind)
	assert.Equal(t, "Ok to proceed? (y)", rr.WaitingInput.Prompt)
	assert.Less(t, time.Since(start), 20*time.Second, "it did not wait for the timeout")
	require.NoError(t, r.Submit(ctx, rr.ID, "y"))
	res, err := r.Wait(ctx, rr.ID, 10*time.Second)
	require.NoError(t, err)
	require.NotNil(t, res.Status)
	assert.Equal(t, 0, res.Status.Code)
}
