package registry

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
)

// crowdedEnv is an envtest.Fake whose kill calls (signals, looks at the
// tree) share one slow sandbox evenly, as calls into a container on a
// loaded machine do: a call takes crowdUnit for every call in flight when
// it starts, itself included.
type crowdedEnv struct {
	*envtest.Fake

	mu          sync.Mutex
	inflight    int
	maxInflight int
}

const crowdUnit = 300 * time.Millisecond

func (c *crowdedEnv) Start(ctx context.Context, spec env.Spec) (env.Process, error) {
	p, err := c.Fake.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &gatedProc{Process: p, gate: c.call}, nil
}

// call waits as long as the crowd makes a call take, or until ctx ends.
func (c *crowdedEnv) call(ctx context.Context) error {
	c.mu.Lock()
	c.inflight++
	c.maxInflight = max(c.maxInflight, c.inflight)
	took := time.Duration(c.inflight) * crowdUnit
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.inflight--
		c.mu.Unlock()
	}()
	t := time.NewTimer(took)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("crowded: no answer: %w", ctx.Err())
	}
}

func (c *crowdedEnv) most() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.maxInflight
}

// TestKillAllOnACrowdedBackendFinishes: kill --all of a score of processes
// on a backend whose calls share it evenly. Unbounded, every call overran
// its deadline at the same moment, the kills were left pending, and their
// resumption, all together again, overran again, for ever; the bound on
// kill calls in flight per backend lets the calls under way finish, so
// every process ends, the first ones in the kill --all itself.
func TestKillAllOnACrowdedBackendFinishes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		crowded := &crowdedEnv{Fake: newFakeEnv()}
		r, err := New(Config{
			Open: func(ctx context.Context, target string) (env.Environment, error) {
				if target == "crowded" {
					return crowded, nil
				}
				return nil, fmt.Errorf("unknown target %q", target)
			},
			DefaultGrace: time.Second,
			Logger:       slog.New(slog.DiscardHandler),
		})
		require.NoError(t, err)
		defer r.Close()
		const n = 20
		for i := range n {
			_, err := r.Start(ctxT(t), StartOptions{Backend: "crowded", Command: fmt.Sprintf("serve %d", i)})
			require.NoError(t, err)
		}

		res, err := r.KillAll(ctxT(t), KillAllOptions{Force: true})
		require.Len(t, res, n)
		killed := 0
		for _, kr := range res {
			if kr.State == StateKilled && !kr.Unreachable {
				killed++
			}
		}
		if err != nil {
			require.ErrorIs(t, err, ErrUnreachable, "a kill not finished is pending, nothing else")
		}
		assert.Positive(t, killed, "no kill of kill --all finished: every call overran its deadline together")
		assert.LessOrEqual(t, crowded.most(), treeCallsPerBackend, "kill calls in flight on one backend")

		// The rest were left pending and run as the backend answers.
		deadline := time.Now().Add(3 * time.Minute)
		for {
			list, err := r.List(ctxT(t), ListOptions{All: true})
			require.NoError(t, err)
			running := 0
			for _, in := range list {
				if !in.State.Final() {
					running++
				}
			}
			if running == 0 {
				break
			}
			require.Falsef(t, time.Now().After(deadline), "%d of %d processes still running 3 minutes after kill --all: their pending kills never finished", running, n)
			time.Sleep(time.Second)
		}
		assert.LessOrEqual(t, crowded.most(), treeCallsPerBackend, "kill calls in flight on one backend")
	})
}
