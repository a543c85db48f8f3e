package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/registry"
)

// A backend whose sandbox the registry reports gone is shown as gone, with
// when, why and what happens next; an open one is ok.
func TestBackendProbeGone(t *testing.T) {
	now := time.Now()
	g := backendProbe(registry.BackendInfo{
		Target: "docker-image://img", Name: "docker://corral-1", Tracked: 2,
		Health: registry.BackendHealth{Condition: env.ConditionGone, Since: now.Add(-3 * time.Second),
			Detail: "container removed: env: sandbox is gone; the next run or start on it opens it again"},
	}, now)
	assert.Truef(t, !g.OK && g.Status == "gone", "gone backend: OK %v, status %q; want not ok, gone", g.OK, g.Status)
	for _, want := range []string{"docker://corral-1", "3s ago", "container removed", "opens it again", "2 processes tracked"} {
		assert.Truef(t, strings.Contains(g.Detail, want), "gone backend's detail %q does not say %q", g.Detail, want)
	}
	ok := backendProbe(registry.BackendInfo{Target: "docker-image://img", Name: "docker://corral-2", OpenedAt: now}, now)
	assert.Truef(t, ok.OK && ok.Status == "", "open backend: OK %v, status %q; want ok", ok.OK, ok.Status)
}

// A paused backend is not ok: doctor says since when and why.
func TestBackendProbeCondition(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b := registry.BackendInfo{Target: "docker://c", Name: "docker://c", OpenedAt: now.Add(-time.Minute), Tracked: 2, Running: 1,
		Health: registry.BackendHealth{Condition: env.ConditionPaused, Detail: "container c is paused: docker unpause c", Since: now.Add(-10 * time.Second)}}
	p := backendProbe(b, now)
	assert.False(t, p.OK)
	assert.Equal(t, "paused", p.Status)
	assert.Contains(t, p.Detail, "paused since 10s ago (container c is paused: docker unpause c)")
	b.Health = registry.BackendHealth{Condition: env.ConditionOK}
	p = backendProbe(b, now)
	assert.True(t, p.OK)
	assert.Empty(t, p.Status)
}
