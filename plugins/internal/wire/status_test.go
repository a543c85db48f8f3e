package wire

import (
	"testing"

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
		if err != nil {
			t.Fatal(err)
		}
		var back pb.ExitStatus
		if err := proto.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if got := StatusFromProto(&back); got != st {
			t.Errorf("%+v came back as %+v", st, got)
		}
	}
}
