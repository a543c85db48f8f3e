//go:build !linux

package local

import "github.com/corralhq/corral/env"

// limitGroups: per-process limits are enforced on Linux only (cgroups);
// Capabilities.Limits is empty elsewhere, so the registry refuses them
// before a start, and a direct Start refuses them here.
type limitGroups struct{}

func (s *system) newLimitGroups(_, _ string, l *env.Limits) (*limitGroups, error) {
	if l == nil || l.IsZero() {
		return nil, nil
	}
	return nil, env.CheckLimits("local", env.Capabilities{LimitsNote: "per-process limits are enforced on Linux only (cgroups)"}, *l)
}

func (s *system) removeLimits(string) {}

func (g *limitGroups) fork(start func() error) error        { return start() }
func (g *limitGroups) oomCounter(def oomCounter) oomCounter { return def }
func (g *limitGroups) remove()                              {}

func (s *system) setCeiling(string, env.Limits) error {
	return &env.LimitError{Backend: "local", Limits: []string{"max-memory"}, Reason: "a ceiling is enforced on Linux only (cgroups)"}
}

func (s *system) dropCeiling() {}
