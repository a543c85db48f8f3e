package registry

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
)

// connected is an environment that holds a connection.
type connected struct {
	*envtest.Fake
	since time.Time
}

func (c connected) ConnStatus() env.ConnStatus {
	return env.ConnStatus{State: env.ConnConnected, Since: c.since, InUse: 1}
}

func TestBackendsListsOpenEnvironments(t *testing.T) {
	since := time.Now().Add(-time.Minute)
	remote := newFakeEnv()
	f := newFixture(t, func(cfg *Config) {
		open := cfg.Open
		cfg.Open = func(ctx context.Context, target string) (env.Environment, error) {
			if target == "remote" {
				return connected{remote, since}, nil
			}
			return open(ctx, target)
		}
	})
	require.Empty(t, f.r.Backends(), "nothing opened yet")

	f.start(StartOptions{Backend: "fake"})
	done, p := f.start(StartOptions{Backend: "fake"})
	p.Exit(env.Exited(0))
	in, err := f.r.Wait(ctxT(t), done.ID, 0)
	require.NoError(t, err)
	require.True(t, in.State.Final())
	_, err = f.r.Start(ctxT(t), StartOptions{Backend: "remote", Command: "remote command"})
	require.NoError(t, err)
	_, err = f.r.Start(ctxT(t), StartOptions{Backend: "nowhere", Command: "x"})
	require.Error(t, err, "a target that cannot be opened")

	bs := f.r.Backends()
	require.Len(t, bs, 2, "%+v", bs)
	require.Equal(t, "fake", bs[0].Target)
	require.Equal(t, "fake", bs[0].Name)
	require.Equal(t, 2, bs[0].Tracked)
	require.Equal(t, 1, bs[0].Running)
	require.Nil(t, bs[0].Conn, "an environment without a connection reports none")
	require.False(t, bs[0].OpenedAt.IsZero())

	require.Equal(t, "remote", bs[1].Target)
	require.Equal(t, 1, bs[1].Tracked)
	require.Equal(t, 1, bs[1].Running)
	require.NotNil(t, bs[1].Conn)
	require.Equal(t, env.ConnConnected, bs[1].Conn.State)
	require.True(t, bs[1].Conn.Since.Equal(since))
}
