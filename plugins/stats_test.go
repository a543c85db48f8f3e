package plugins_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
	"github.com/corralhq/corral/plugins"
	pb "github.com/corralhq/corral/plugins/proto"
)

// fixedTreeStats is what the test plugin's HOSTSH_TREE_STATS=fixed reports
// (its fixedTreeStats, repeated here: a test cannot import a main package).
func fixedTreeStats(pid, n int, noIO bool) *env.TreeStats {
	s := &env.TreeStats{CPU: time.Duration(pid)*time.Millisecond + 7, RSS: int64(pid)<<24 + 3, Pids: n,
		ReadBytes: int64(pid)*1000 + 1, WriteBytes: int64(pid)*1000 + 2}
	if noIO {
		s.ReadBytes, s.WriteBytes, s.Missing = 0, 0, []string{"io"}
	}
	return s
}

// openHostsh opens the test plugin with its TreeStats behaviour mode ("" is
// the engine's own) and dial options that watch the host's calls.
func openHostsh(t *testing.T, mode string, dial ...grpc.DialOption) env.Environment {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := testOptions()
	if mode != "" {
		opts.Env = []string{"HOSTSH_TREE_STATS=" + mode}
	}
	e, err := plugins.Open(ctx, "hostsh://?base="+t.TempDir()+"/state", plugins.WithDialOptions(opts, dial...))
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	return e
}

// startSleep starts a process that lives until the test ends, and kills
// its tree then, whether or not its handle was released.
func startSleep(ctx context.Context, t *testing.T, e env.Environment, spec env.Spec) env.Process {
	t.Helper()
	p, err := e.Start(ctx, spec)
	require.NoError(t, err)
	pids, err := p.Survivors(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, pids, "a sleeping process has no tree")
	t.Cleanup(func() {
		for _, pid := range append(pids, p.PID()) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = p.Release()
	})
	return p
}

// TestTreeStatsRoundTrip: a plugin whose Environment measures answers for
// every tree in one call, each field intact and in its process's place; a
// tree that is gone, a released handle and another Environment's process
// get nil.
func TestTreeStatsRoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var log callLog
	e := openHostsh(t, "fixed", log.options()...)
	ts, ok := e.(env.TreeStatter)
	require.True(t, ok, "the plugin host's Env is not an env.TreeStatter")

	a := startSleep(ctx, t, e, env.Spec{Command: "sleep 60"})
	b := startSleep(ctx, t, e, env.Spec{Command: "sleep 60", Env: []string{"HOSTSH_NO_IO=1"}})
	released := startSleep(ctx, t, e, env.Spec{Command: "sleep 60"})
	require.NoError(t, released.Release())
	gone, err := e.Start(ctx, env.Spec{Command: "exit 0"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = gone.Release() })
	st, err := gone.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, env.Exited(0), st)
	foreign, err := (&envtest.Fake{}).Start(ctx, env.Spec{Command: "true"})
	require.NoError(t, err)

	sizeA, err := a.Survivors(ctx)
	require.NoError(t, err)
	sizeB, err := b.Survivors(ctx)
	require.NoError(t, err)
	got, err := ts.TreeStats(ctx, []env.Process{a, foreign, b, gone, released})
	require.NoError(t, err)
	want := []*env.TreeStats{fixedTreeStats(a.PID(), len(sizeA), false), nil, fixedTreeStats(b.PID(), len(sizeB), true), nil, nil}
	assert.Equal(t, want, got)
	assert.Equal(t, 1, log.count(pb.Backend_TreeStats_FullMethodName), "the trees were not measured in one call")

	// Nothing of this Environment's: no call at all.
	got, err = ts.TreeStats(ctx, []env.Process{foreign, released})
	require.NoError(t, err)
	assert.Equal(t, []*env.TreeStats{nil, nil}, got)
	got, err = ts.TreeStats(ctx, nil)
	require.NoError(t, err)
	assert.Empty(t, got)
	assert.Equal(t, 1, log.count(pb.Backend_TreeStats_FullMethodName), "a call went out for no process of the plugin")
}

// TestTreeStatsNotMeasuring: a plugin whose Environment does not implement
// env.TreeStatter says so on Open, and the host reports ErrUnsupported
// (the backend does not measure) without a call.
func TestTreeStatsNotMeasuring(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var log callLog
	e := openHostsh(t, "none", log.options()...)
	p := startSleep(ctx, t, e, env.Spec{Command: "sleep 60"})
	_, err := e.(env.TreeStatter).TreeStats(ctx, []env.Process{p})
	require.ErrorIs(t, err, env.ErrUnsupported)
	assert.Contains(t, err.Error(), "does not measure")
	assert.Zero(t, log.count(pb.Backend_TreeStats_FullMethodName), "the host asked a plugin that said it does not measure")
}

// TestTreeStatsOldPlugin: a plugin that claims to measure but answers
// Unimplemented (built before the call) is reported as not measuring,
// ErrUnsupported and no failure of another kind, and is not asked again.
func TestTreeStatsOldPlugin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var log callLog
	unimplemented := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == pb.Backend_TreeStats_FullMethodName {
			return status.Error(codes.Unimplemented, "unknown method TreeStats for service corral.plugin.v1.Backend")
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	e := openHostsh(t, "fixed", append(log.options(), unimplemented)...)
	p := startSleep(ctx, t, e, env.Spec{Command: "sleep 60"})
	ts := e.(env.TreeStatter)
	for range 2 {
		_, err := ts.TreeStats(ctx, []env.Process{p})
		require.ErrorIs(t, err, env.ErrUnsupported)
	}
	assert.Equal(t, 1, log.count(pb.Backend_TreeStats_FullMethodName), "the host kept asking a plugin without the call")
	// The plugin still serves everything else.
	_, err := p.Survivors(ctx)
	require.NoError(t, err)
}

// TestTreeStatsEngine: the engine of a ServeTransport plugin (hostsh:
// env/nohup on this machine) and env/local re-hosted (localplugin) measure
// their trees for real across the boundary, once they implement
// env.TreeStatter; until then they must say that they do not measure.
func TestTreeStatsEngine(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) env.Environment{
		"hostsh":      func(t *testing.T) env.Environment { return openHostsh(t, "") },
		"localplugin": func(t *testing.T) env.Environment { return openWith(t, testOptions()) },
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			e := open(t)
			p := startSleep(ctx, t, e, env.Spec{Command: "sleep 60"})
			got, err := e.(env.TreeStatter).TreeStats(ctx, []env.Process{p})
			if err != nil {
				require.ErrorIs(t, err, env.ErrUnsupported)
				t.Skipf("%s does not measure process trees yet: %v", name, err)
			}
			require.Len(t, got, 1)
			require.NotNil(t, got[0], "a live tree was not measured")
			assert.GreaterOrEqual(t, got[0].Pids, 1)
			assert.Positive(t, got[0].RSS)
			assert.GreaterOrEqual(t, got[0].CPU, time.Duration(0))
		})
	}
}
