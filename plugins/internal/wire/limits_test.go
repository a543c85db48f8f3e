package wire

import (
	"testing"

	"github.com/corralhq/corral/env"
)

// TestLimitsRoundTrip: limits cross the protocol in a Spec and in
// Capabilities unchanged; none stays none.
func TestLimitsRoundTrip(t *testing.T) {
	l := &env.Limits{Memory: 100 << 20, CPUs: 1.5, Pids: 64}
	spec := SpecFromProto(SpecToProto(env.Spec{Command: "true", Limits: l}))
	if spec.Limits == nil || *spec.Limits != *l {
		t.Errorf("Spec.Limits = %+v, want %+v", spec.Limits, l)
	}
	if got := SpecFromProto(SpecToProto(env.Spec{Command: "true", Limits: &env.Limits{}})).Limits; got != nil {
		t.Errorf("zero Limits came back as %+v, want nil", got)
	}
	caps := CapsFromProto(CapsToProto(env.Capabilities{Limits: []string{env.LimitMemory}, LimitsNote: "no pids controller", SandboxLimits: l}))
	if len(caps.Limits) != 1 || caps.Limits[0] != env.LimitMemory || caps.LimitsNote != "no pids controller" || caps.SandboxLimits == nil || *caps.SandboxLimits != *l {
		t.Errorf("Capabilities came back as %+v", caps)
	}
}
