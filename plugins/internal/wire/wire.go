// Package wire holds what the plugin host and the SDK must agree on: the
// go-plugin handshake, the plugin set, and the conversions between env
// values and their protobuf form, errors included.
package wire

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/corralhq/corral/env"
	pb "github.com/corralhq/corral/plugins/proto"
)

// ProtocolVersion is the protocol this build speaks. A new major revision of
// backend.proto gets a new number and both are offered in VersionedPlugins
// for as long as the old one is supported.
const ProtocolVersion = 1

// OwnerEnv carries Options.Owner to the plugin process (sdk.Owner).
const OwnerEnv = "CORRAL_OWNER"

// PluginName is the name of the one plugin in the set a backend serves.
const PluginName = "backend"

// Handshake is the go-plugin handshake. The cookie is not a secret: it only
// makes a plugin binary run by hand say that it must be started by corral.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "CORRAL_BACKEND_PLUGIN",
	MagicCookieValue: "b5c8a1f0-corral-backend-plugin",
}

// OutputChunkSize is the most output one stream message carries. Big chunks
// keep the per-message cost (framing, TLS records, allocations) small next
// to the copy itself.
const OutputChunkSize = 256 << 10

// MaxMessageSize is the gRPC message limit both sides set: a chunk of
// output, a stdin write, or a Start whose command is as long as the
// daemon's API takes (its 8 MiB request body; a command has no length
// limit of its own, see env.InlineCommandMax), plus framing. A plugin
// built with an older SDK (4 MiB) refuses a longer command with
// ResourceExhausted, an error that says so.
const MaxMessageSize = 16 << 20

// StreamWindowSize and ConnWindowSize are the HTTP/2 flow-control windows
// both sides set. Fixed windows turn off grpc-go's bandwidth estimation,
// which answers nearly every small message with a PING round trip: two
// more writes and wake-ups per call, for an estimate that a Unix socket
// between two local processes does not need. The sizes, below the
// estimate's own ceiling (16 MiB), keep many Output chunks in flight.
const (
	StreamWindowSize = 4 << 20
	ConnWindowSize   = 16 << 20
)

// ReadBufferSize and WriteBufferSize are the sizes of the buffers between
// gRPC's HTTP/2 framer and the connection, both sides.
const (
	ReadBufferSize  = 32 << 10
	WriteBufferSize = 32 << 10
)

// GRPCPlugin is the go-plugin glue. Backend is set on the plugin side; the
// host only dispenses the client.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Backend pb.BackendServer
}

// GRPCServer registers the backend service.
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterBackendServer(s, p.Backend)
	return nil
}

// GRPCClient returns a pb.BackendClient on the plugin's connection.
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return pb.NewBackendClient(c), nil
}

// PluginSets returns the VersionedPlugins map for server (nil on the host).
func PluginSets(server pb.BackendServer) map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{
		ProtocolVersion: {PluginName: &GRPCPlugin{Backend: server}},
	}
}

// SpecToProto converts a Spec.
func SpecToProto(s env.Spec) *pb.Spec {
	out := &pb.Spec{Command: s.Command, Dir: s.Dir, Env: s.Env, Stdin: s.Stdin, Detach: s.Detach, Tag: s.Tag, Limits: LimitsToProto(s.Limits)}
	if s.PTY != nil {
		out.Pty = &pb.WindowSize{Rows: uint32(s.PTY.Rows), Cols: uint32(s.PTY.Cols)}
	}
	return out
}

// SpecFromProto converts a Spec back. Sizes beyond uint16 are clamped so
// Validate, not a silent wrap-around, judges them.
func SpecFromProto(s *pb.Spec) env.Spec {
	out := env.Spec{Command: s.GetCommand(), Dir: s.GetDir(), Env: s.GetEnv(), Stdin: s.GetStdin(), Detach: s.GetDetach(), Tag: s.GetTag(), Limits: LimitsFromProto(s.GetLimits())}
	if s.GetPty() != nil {
		ws := WindowSizeFromProto(s.GetPty())
		out.PTY = &ws
	}
	return out
}

// WindowSizeFromProto converts a window size, clamping to uint16.
func WindowSizeFromProto(w *pb.WindowSize) env.WindowSize {
	return env.WindowSize{Rows: clamp16(w.GetRows()), Cols: clamp16(w.GetCols())}
}

func clamp16(v uint32) uint16 {
	if v > 0xffff {
		return 0xffff
	}
	return uint16(v)
}

// CapsToProto converts Capabilities.
func CapsToProto(c env.Capabilities) *pb.Capabilities {
	return &pb.Capabilities{Pty: c.PTY, Resize: c.Resize, Stdin: c.Stdin, Reattach: c.Reattach, ReattachPty: c.ReattachPTY,
		ReplayOutput: c.ReplayOutput, TreeKill: c.TreeKill, Notes: c.Notes, Ports: c.Ports, CheckUrl: c.CheckURL,
		Limits: c.Limits, LimitsNote: c.LimitsNote, SandboxLimits: LimitsToProto(c.SandboxLimits), InputWait: c.InputWait}
}

// CapsFromProto converts Capabilities back.
func CapsFromProto(c *pb.Capabilities) env.Capabilities {
	return env.Capabilities{PTY: c.GetPty(), Resize: c.GetResize(), Stdin: c.GetStdin(), Reattach: c.GetReattach(),
		ReattachPTY: c.GetReattachPty(), ReplayOutput: c.GetReplayOutput(), TreeKill: c.GetTreeKill(), Notes: c.GetNotes(),
		Ports: c.GetPorts(), CheckURL: c.GetCheckUrl(),
		Limits: c.GetLimits(), LimitsNote: c.GetLimitsNote(), SandboxLimits: LimitsFromProto(c.GetSandboxLimits()),
		InputWait: c.GetInputWait()}
}

// LimitsToProto converts Limits; nil (or none set) is unset.
func LimitsToProto(l *env.Limits) *pb.Limits {
	if l == nil || l.IsZero() {
		return nil
	}
	return &pb.Limits{MemoryBytes: l.Memory, Cpus: l.CPUs, Pids: l.Pids}
}

// LimitsFromProto converts Limits back; unset is nil.
func LimitsFromProto(l *pb.Limits) *env.Limits {
	if l == nil {
		return nil
	}
	out := &env.Limits{Memory: l.GetMemoryBytes(), CPUs: l.GetCpus(), Pids: l.GetPids()}
	if out.IsZero() {
		return nil
	}
	return out
}

// ListenersToProto converts Listeners.
func ListenersToProto(ls []env.Listener) *pb.ListenersResponse {
	out := make([]*pb.Listener, len(ls))
	for i, l := range ls {
		out[i] = &pb.Listener{Port: int32(l.Port), Addr: l.Addr, Pid: int64(l.PID), Command: l.Command}
	}
	return &pb.ListenersResponse{Listeners: out}
}

// ListenersFromProto converts Listeners back.
func ListenersFromProto(r *pb.ListenersResponse) []env.Listener {
	out := make([]env.Listener, len(r.GetListeners()))
	for i, l := range r.GetListeners() {
		out[i] = env.Listener{Port: int(l.GetPort()), Addr: l.GetAddr(), PID: int(l.GetPid()), Command: l.GetCommand()}
	}
	return out
}

// RefToProto converts a Ref.
func RefToProto(r env.Ref) *pb.Ref {
	return &pb.Ref{Env: r.Env, Pid: int64(r.PID), Data: r.Data}
}

// RefFromProto converts a Ref back.
func RefFromProto(r *pb.Ref) env.Ref {
	return env.Ref{Env: r.GetEnv(), PID: int(r.GetPid()), Data: r.GetData()}
}

// StatusToProto converts an ExitStatus.
func StatusToProto(s env.ExitStatus) *pb.ExitStatus {
	return &pb.ExitStatus{Code: int64(s.Code), Signal: string(s.Signal), OomKilled: s.OOMKilled}
}

// StatusFromProto converts an ExitStatus back.
func StatusFromProto(s *pb.ExitStatus) env.ExitStatus {
	return env.ExitStatus{Code: int(s.GetCode()), Signal: env.Signal(s.GetSignal()), OOMKilled: s.GetOomKilled()}
}
