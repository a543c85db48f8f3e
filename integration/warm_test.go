package integration

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env/ssh/sshtest"
)

// doctorProbe is one line of `corral doctor --json`.
type doctorProbe struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	Status string `json:"status"`
}

func (h *daemonHome) doctor(name string) (doctorProbe, bool) {
	h.t.Helper()
	var probes []doctorProbe
	require.NoError(h.t, json.Unmarshal([]byte(h.mustRun("doctor", "--json")), &probes))
	i := slices.IndexFunc(probes, func(p doctorProbe) bool { return p.Name == name })
	if i < 0 {
		return doctorProbe{}, false
	}
	return probes[i], true
}

// The daemon keeps one SSH connection per host for every corral run, shows
// it in corral doctor, closes it after --idle-close without use and dials
// again on the next run.
func TestDaemonKeepsSSHWarm(t *testing.T) {
	sshtest.Require(t) // skips, or fails under CORRAL_REQUIRE_SSH=1
	srv := sshtest.Start(t)
	bin := buildCorral(t)
	h := newDaemonHome(t, bin)
	h.trustSSH(srv)
	h.env = slices.DeleteFunc(h.env, func(kv string) bool { return strings.HasPrefix(kv, "CORRAL_IDLE_CLOSE=") })
	// Reaches the daemon the first run auto-starts.
	const idle = 2 * time.Second
	h.env = append(h.env, "CORRAL_IDLE_CLOSE="+idle.String())
	accepted := func() int { return strings.Count(srv.Log(), "Accepted publickey") }

	for i := range 3 {
		out := h.mustRun("run", "--backend", srv.Target(), "--", "echo", "warm")
		require.Equal(t, "warm\n", out, "run %d", i)
	}
	require.Equal(t, 1, accepted(), "three runs through the daemon, want one SSH connection:\n%s", srv.Log())

	name := "open " + srv.Target()
	p, ok := h.doctor(name)
	require.True(t, ok, "corral doctor does not list %s", name)
	require.Equal(t, "connected", p.Status, "%+v", p)
	require.True(t, p.OK)
	require.Contains(t, p.Detail, "3 processes tracked, 0 running")
	// A moment with no call under way (the engine tidies the host after
	// a run) shows when the connection closes.
	require.Eventually(t, func() bool {
		p, _ := h.doctor(name)
		return strings.Contains(p.Detail, "closes when idle in")
	}, time.Minute, 50*time.Millisecond, "doctor never says when the idle connection closes")

	require.Eventually(t, func() bool {
		p, _ := h.doctor(name)
		return p.Status == "idle"
	}, time.Minute, 100*time.Millisecond, "the connection was not closed after %s without use", idle)
	require.Equal(t, 1, accepted(), "an idle connection was dialled again with nobody asking")

	require.Equal(t, "back\n", h.mustRun("run", "--backend", srv.Target(), "--", "echo", "back"))
	require.Equal(t, 2, accepted())
	p, _ = h.doctor(name)
	require.Equal(t, "connected", p.Status, "%+v", p)
}
