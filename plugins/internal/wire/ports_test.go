package wire

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

// TestPortsConversions: listeners and the ports capabilities survive the
// wire; a bare Unimplemented (a plugin built before a call existed) reads
// as ErrUnsupported.
func TestPortsConversions(t *testing.T) {
	ls := []env.Listener{{Port: 3000, Addr: "127.0.0.1", PID: 42, Command: "node server.js"}, {Port: 8080, Addr: "::"}}
	assert.Equal(t, ls, ListenersFromProto(ListenersToProto(ls)))
	assert.Empty(t, ListenersFromProto(nil))

	caps := env.Capabilities{Ports: true, CheckURL: true, TreeKill: "pgroup"}
	assert.Equal(t, caps, CapsFromProto(CapsToProto(caps)))

	err := FromStatus("plugin x: check url", status.Error(codes.Unimplemented, "unknown method CheckURL"))
	require.ErrorIs(t, err, env.ErrUnsupported)
	assert.Contains(t, err.Error(), "older corral SDK")
	assert.False(t, errors.Is(FromStatus("op", status.Error(codes.Internal, "x")), env.ErrUnsupported))
}
