package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/corralhq/corral/env"
	pb "github.com/corralhq/corral/plugins/proto"
)

// TestStatusRoundTrip sends exit statuses through their wire form and
// its encoding, OOMKilled included: a plugin's OOM kill must reach the
// host as one.
func TestStatusRoundTrip(t *testing.T) {
	for _, st := range []env.ExitStatus{
		env.Exited(0), env.Exited(3), env.Signaled(env.SIGTERM),
		{Code: -1, Signal: env.SIGKILL, OOMKilled: true},
		{Code: 137, OOMKilled: true},
	} {
		b, err := proto.Marshal(StatusToProto(st))
		require.NoError(t, err)
		var back pb.ExitStatus
		require.NoError(t, proto.Unmarshal(b, &back))
		got := StatusFromProto(&back)
		assert.Truef(t, got == st, "%+v came back as %+v", st, got)
	}
}
