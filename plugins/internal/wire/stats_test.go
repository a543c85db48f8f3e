package wire

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	pb "github.com/corralhq/corral/plugins/proto"
)

// TestTreeStatsConversions: every field of env.TreeStats survives the
// wire, nil entries stay nil in their place, and what no tree has (a
// negative figure, a flood of Missing names) does not reach the host as a
// measurement.
func TestTreeStatsConversions(t *testing.T) {
	in := []*env.TreeStats{
		{CPU: 90*time.Second + 7, RSS: 5 << 32, Pids: 3, ReadBytes: 11, WriteBytes: 12},
		nil,
		{CPU: time.Millisecond, RSS: 1, Pids: 1, Missing: []string{"io"}},
	}
	resp := TreeStatsToProto(in)
	out := make([]*env.TreeStats, len(resp.GetTrees()))
	for i, tr := range resp.GetTrees() {
		out[i] = TreeStatFromProto(tr)
	}
	assert.Equal(t, in, out)
	assert.Nil(t, TreeStatFromProto(nil))

	got := TreeStatFromProto(&pb.TreeStats{Present: true, CpuNanos: -1, RssBytes: -2, Pids: -3, ReadBytes: -4, WriteBytes: 9})
	assert.Equal(t, &env.TreeStats{Missing: []string{"cpu", "rss", "pids", "io"}}, got)

	flood := make([]string, 100)
	for i := range flood {
		flood[i] = strings.Repeat("m", 1000)
	}
	got = TreeStatFromProto(&pb.TreeStats{Present: true, Missing: flood})
	assert.Len(t, got.Missing, maxMissing)
	assert.Len(t, got.Missing[0], maxMissingLen)
}

// TestInputWaitsConversions: every kind crosses the wire; none travels as
// "", and a kind corral does not know comes back as none.
func TestInputWaitsConversions(t *testing.T) {
	ws := []*env.InputWait{nil, {Kind: env.InputLine}, {Kind: env.InputRaw}, {Kind: env.InputPassword}, {Kind: env.InputPipe}}
	resp := InputWaitsToProto(ws)
	require.Len(t, resp.GetKinds(), len(ws))
	for i, k := range resp.GetKinds() {
		assert.Equal(t, ws[i], InputWaitFromProto(k))
	}
	assert.Nil(t, InputWaitFromProto("typing"))
	c := CapsFromProto(CapsToProto(env.Capabilities{InputWait: true}))
	assert.True(t, c.InputWait)
}
