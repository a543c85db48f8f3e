package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// allStates is every State, and the zero State of a process being made.
var allStates = []State{"", StateStarting, StateRunning, StateRecovering,
	StateExited, StateKilled, StateTimedOut, StateLost, StateFailed}

// syncBuffer is a log sink the registry's goroutines may write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// take returns what was logged since the last take.
func (s *syncBuffer) take() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.b.String()
	s.b.Reset()
	return out
}

// pidOnly is a handle of which the transitions call PID only.
type pidOnly struct{ env.Process }

func (pidOnly) PID() int { return 42 }

// lifecycleRegistry is a registry whose errors are logged to the
// returned buffer.
func lifecycleRegistry(t *testing.T) (*Registry, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	r, err := New(Config{
		Open:   func(context.Context, string) (env.Environment, error) { return newFakeEnv(), nil },
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r, logs
}

// procIn is a process of r in state from, as no transition could make it
// (the zero State included).
func procIn(r *Registry, from State) *proc {
	p := r.newProc("proc_lifecycle0001", StartOptions{Backend: "fake"}, time.Now(), StateStarting)
	p.state = from
	return p
}

// TestTransitionTable: every pair of states, legal or not. The expected
// moves are written out here again, as the lifecycle the registry
// documents (types.go's State): a process moves from starting to running
// and ends in one final state, which it never leaves; Recover makes one
// recovering (or in its recorded final state) until it is re-attached or
// settled. An illegal move is refused, leaves the state as it was and is
// logged at error level.
func TestTransitionTable(t *testing.T) {
	final := []State{StateExited, StateKilled, StateTimedOut, StateLost, StateFailed}
	legal := map[State][]State{
		"":              append([]State{StateStarting, StateRecovering}, final...),
		StateStarting:   {StateRunning, StateFailed},
		StateRunning:    {StateExited, StateKilled, StateTimedOut, StateLost},
		StateRecovering: append([]State{StateRunning}, final...),
	}
	r, logs := lifecycleRegistry(t)
	for _, from := range allStates {
		for _, to := range allStates {
			t.Run(fmt.Sprintf("%q->%q", from, to), func(t *testing.T) {
				want := false
				for _, s := range legal[from] {
					want = want || s == to
				}
				assert.Equal(t, want, canMove(from, to))
				p := procIn(r, from)
				logs.take()
				p.mu.Lock()
				moved := p.moveLocked(to)
				got := p.state
				p.mu.Unlock()
				assert.Equal(t, want, moved)
				if want {
					assert.Equal(t, to, got)
					assert.Empty(t, logs.take())
					return
				}
				assert.Equal(t, from, got, "a refused move leaves the state")
				logged := logs.take()
				assert.Contains(t, logged, "level=ERROR")
				assert.Contains(t, logged, "illegal state transition")
			})
		}
	}
	for _, s := range final {
		assert.Empty(t, transitions[s], "a final state is never left")
	}
	for from := range transitions {
		assert.Contains(t, allStates, from)
	}
}

// TestTransitionsRefusedOnceEnded: the transitions of a process that has
// already ended (a bug of the registry) are refused without their side
// effects: no channel is closed twice (a panic that would take every
// process's supervision with it), and the recorded end stays.
func TestTransitionsRefusedOnceEnded(t *testing.T) {
	r, logs := lifecycleRegistry(t)
	p := procIn(r, StateStarting)
	p.endUnrun(StateFailed, "could not start")
	require.True(t, isClosed(p.started))
	require.True(t, isClosed(p.done))
	require.True(t, isClosed(p.treeDone))
	ended := p.endedAt.Load()
	require.NotZero(t, ended)
	assert.Empty(t, logs.take())

	assert.NotPanics(t, func() { p.endUnrun(StateLost, "again") })
	assert.NotPanics(t, func() {
		_, ok := p.end(env.ExitStatus{Code: 3}, nil)
		assert.False(t, ok)
	})
	h := pidOnly{}
	assert.False(t, p.running(h, nil, nil, true))
	assert.False(t, p.reattached(h, nil, false))
	assert.Equal(t, StateFailed, p.leaveRecovering())

	in := p.info()
	assert.Equal(t, StateFailed, in.State)
	assert.Equal(t, "could not start", in.Reason)
	assert.Nil(t, in.Status)
	assert.Equal(t, ended, p.endedAt.Load())
	logged := logs.take()
	assert.Equal(t, 4, strings.Count(logged, "level=ERROR"), logged)
}

// TestTransitions: each transition method moves the process as the table
// says and does its side effects.
func TestTransitions(t *testing.T) {
	r, logs := lifecycleRegistry(t)
	h := pidOnly{}
	ref := &env.Ref{Env: "fake"}

	t.Run("start", func(t *testing.T) {
		p := procIn(r, StateStarting)
		require.True(t, p.running(h, nil, ref, true))
		assert.True(t, isClosed(p.started))
		assert.False(t, isClosed(p.done))
		in := p.info()
		assert.Equal(t, StateRunning, in.State)
		assert.True(t, in.Detached)
		assert.False(t, in.StartedAt.IsZero())
		assert.NotZero(t, p.lastOutput.Load())
	})
	t.Run("exit", func(t *testing.T) {
		p := procIn(r, StateRunning)
		in, ok := p.end(env.ExitStatus{Code: 2, OOMKilled: true}, nil)
		require.True(t, ok)
		assert.Equal(t, StateExited, in.State)
		assert.Equal(t, ReasonOutOfMemory, in.Reason)
		require.NotNil(t, in.Status)
		assert.Equal(t, 2, in.Status.Code)
		assert.True(t, isClosed(p.done))
		assert.NotZero(t, p.endedAt.Load())
	})
	t.Run("killed", func(t *testing.T) {
		p := procIn(r, StateRunning)
		p.killReason, p.timedOut = StateTimedOut, TimedOutTTL
		in, ok := p.end(env.ExitStatus{Signal: "TERM", OOMKilled: true}, nil)
		require.True(t, ok)
		assert.Equal(t, StateTimedOut, in.State)
		assert.Empty(t, in.Reason)
		require.NotNil(t, in.Status)
		assert.False(t, in.Status.OOMKilled, "our signal explains the end")
	})
	t.Run("lost", func(t *testing.T) {
		p := procIn(r, StateRecovering)
		in, ok := p.end(env.ExitStatus{}, errors.New("sandbox gone"))
		require.True(t, ok)
		assert.Equal(t, StateLost, in.State)
		assert.Equal(t, "sandbox gone", in.Reason)
		assert.Nil(t, in.Status)
	})
	t.Run("reattached running", func(t *testing.T) {
		p := procIn(r, StateRecovering)
		require.True(t, p.reattached(h, nil, false))
		assert.Equal(t, StateRunning, p.info().State)
		assert.True(t, isClosed(p.started))
	})
	t.Run("reattached ended", func(t *testing.T) {
		p := procIn(r, StateRecovering)
		require.True(t, p.reattached(h, nil, true))
		assert.Equal(t, StateRecovering, p.info().State, "recovering until its monitor records the end")
		assert.Equal(t, StateRunning, p.leaveRecovering())
	})
	t.Run("annotate", func(t *testing.T) {
		p := procIn(r, StateRunning)
		p.annotate("first", true)
		p.annotate("second", true)
		assert.Equal(t, "first", p.info().Reason)
		p.annotate("third", false)
		assert.Equal(t, "third", p.info().Reason)
		p.endUnrun(StateKilled, "ended")
		p.annotate("late", false)
		assert.Equal(t, "ended", p.info().Reason, "the reason of an ended process stays")
	})
	assert.Empty(t, logs.take())
}
