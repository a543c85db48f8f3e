package sdk

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
	"github.com/corralhq/corral/plugins/internal/wire"
	pb "github.com/corralhq/corral/plugins/proto"
)

// measuringFake is an envtest.Fake that measures: each tree costs what its
// PID says, and it records which processes it was asked about.
type measuringFake struct {
	*envtest.Fake
	mu    sync.Mutex
	asked [][]int
}

func (m *measuringFake) TreeStats(_ context.Context, procs []env.Process) ([]*env.TreeStats, error) {
	var pids []int
	out := make([]*env.TreeStats, len(procs))
	for i, p := range procs {
		pids = append(pids, p.PID())
		out[i] = &env.TreeStats{CPU: time.Duration(p.PID()) * time.Microsecond, RSS: int64(p.PID()) << 33, Pids: 2,
			ReadBytes: 5, WriteBytes: 6, Missing: []string{"x"}}
	}
	m.mu.Lock()
	m.asked = append(m.asked, pids)
	m.mu.Unlock()
	return out, nil
}

// TestTreeStatsServed: an Environment that implements env.TreeStatter is
// announced (tree_stats) and served: it is asked about the handles it
// knows, in one call, and an unknown or released handle is absent.
func TestTreeStatsServed(t *testing.T) {
	ctx := context.Background()
	m := &measuringFake{Fake: &envtest.Fake{}}
	_, client, open := serveEnv(t, m)
	assert.True(t, open.GetCapabilities().GetTreeStats(), "Open does not say that the Environment measures")
	caps, err := client.Capabilities(ctx, &pb.Empty{})
	require.NoError(t, err)
	assert.True(t, caps.GetCapabilities().GetTreeStats(), "Capabilities does not say that the Environment measures")

	var ids []uint64
	for range 2 {
		resp, err := client.Start(ctx, &pb.StartRequest{Spec: &pb.Spec{Command: "true"}})
		require.NoError(t, err)
		ids = append(ids, resp.GetProcessId())
	}
	_, err = client.Release(ctx, &pb.ProcessRequest{ProcessId: ids[1]})
	require.NoError(t, err)
	resp, err := client.TreeStats(ctx, &pb.TreeStatsRequest{ProcessIds: []uint64{ids[1], ids[0], 999}})
	require.NoError(t, err)
	pid := m.Procs()[0].PID()
	got := make([]*env.TreeStats, len(resp.GetTrees()))
	for i, tr := range resp.GetTrees() {
		got[i] = wire.TreeStatFromProto(tr)
	}
	want := []*env.TreeStats{nil, {CPU: time.Duration(pid) * time.Microsecond, RSS: int64(pid) << 33, Pids: 2, ReadBytes: 5, WriteBytes: 6, Missing: []string{"x"}}, nil}
	assert.Equal(t, want, got)
	m.mu.Lock()
	defer m.mu.Unlock()
	assert.Equal(t, [][]int{{pid}}, m.asked, "the Environment was asked about handles it does not hold")
}

// TestTreeStatsUnsupportedServed: an Environment without env.TreeStatter
// is announced as not measuring, and the call answers ErrUnsupported.
func TestTreeStatsUnsupportedServed(t *testing.T) {
	_, client, open := serveEnv(t, &envtest.Fake{})
	assert.False(t, open.GetCapabilities().GetTreeStats(), "Open says that an Environment without TreeStats measures")
	_, err := client.TreeStats(context.Background(), &pb.TreeStatsRequest{ProcessIds: []uint64{1}})
	require.ErrorIs(t, wire.FromStatus("tree stats", err), env.ErrUnsupported)
}
