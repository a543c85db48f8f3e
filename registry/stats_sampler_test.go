package registry

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
)

// TestStatsDisabled: with Config.DisableStats a backend that measures is
// never asked, and Info and Stats show no figures; the same registry
// without it samples (so the test would see a sampler that ignores the
// switch).
func TestStatsDisabled(t *testing.T) {
	for _, disable := range []bool{true, false} {
		t.Run(fmt.Sprintf("disable=%v", disable), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				se := &statsEnv{StatsFake: envtest.NewStatsFake(newFakeEnv()), health: env.Health{Condition: env.ConditionOK}}
				r, err := New(Config{
					Open:           func(context.Context, string) (env.Environment, error) { return se, nil },
					DefaultBackend: "measured",
					DefaultGrace:   time.Second,
					Logger:         slog.New(slog.DiscardHandler),
					DisableStats:   disable,
				})
				require.NoError(t, err)
				defer r.Close()
				in, err := r.Start(ctxT(t), StartOptions{Command: "work"})
				require.NoError(t, err)
				se.SetStats(se.Last(), env.TreeStats{CPU: time.Second, RSS: 1 << 20, Pids: 1})
				settle(5500 * time.Millisecond)

				asked := 0
				for _, c := range se.StatsCalls() {
					if len(c) > 0 {
						asked++
					}
				}
				got, err := r.Get(ctxT(t), in.ID)
				require.NoError(t, err)
				rep, err := r.Stats(ctxT(t), in.ID)
				require.NoError(t, err)
				if disable {
					assert.Zero(t, asked, "TreeStats calls about a process with stats disabled")
					assert.Nil(t, got.Stats)
					assert.Nil(t, rep.Stats)
					assert.Empty(t, rep.History)
					return
				}
				assert.Positive(t, asked)
				require.NotNil(t, got.Stats)
				assert.Equal(t, int64(1<<20), got.Stats.RSSBytes)
				assert.NotEmpty(t, rep.History)
			})
		})
	}
}

// slowStatsEnv answers TreeStats after a delay, as a real backend does.
type slowStatsEnv struct {
	*statsEnv
	delay time.Duration
}

func (e *slowStatsEnv) TreeStats(ctx context.Context, procs []env.Process) ([]*env.TreeStats, error) {
	time.Sleep(e.delay)
	return e.statsEnv.TreeStats(ctx, procs)
}

// TestStatsPaceWithSlowCalls: a young process is sampled every second
// when each TreeStats call takes 100 ms, not every other round (the pace
// counts from the answer, which comes after the round's tick).
func TestStatsPaceWithSlowCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		se := &slowStatsEnv{
			statsEnv: &statsEnv{StatsFake: envtest.NewStatsFake(newFakeEnv()), health: env.Health{Condition: env.ConditionOK}},
			delay:    100 * time.Millisecond,
		}
		r, err := New(Config{
			Open:           func(context.Context, string) (env.Environment, error) { return se, nil },
			DefaultBackend: "measured",
			DefaultGrace:   time.Second,
			Logger:         slog.New(slog.DiscardHandler),
		})
		require.NoError(t, err)
		defer r.Close()
		in, err := r.Start(ctxT(t), StartOptions{Command: "work"})
		require.NoError(t, err)
		se.SetStats(se.Last(), env.TreeStats{CPU: time.Second, RSS: 1 << 20, Pids: 1})
		settle(10*time.Second + 500*time.Millisecond)
		rep, err := r.Stats(ctxT(t), in.ID)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, len(rep.History), 9, "samples of a young process over 10 s with 100 ms calls")
	})
}
