package engine

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/cli"
	"github.com/corralhq/corral/registry"
)

func TestMain(m *testing.M) {
	// These tests run corrald's command line in process: none may start
	// (or find) a daemon of the machine's user.
	os.Setenv("CORRAL_NO_DAEMON", "1")
	os.Setenv("CORRAL_NO_AUTOSTART", "1")
	cli.SetEngine(New())
	goleak.VerifyTestMain(m)
}

// corral runs the command line in process, as corrald, and returns its
// exit code, stdout and stderr.
func corral(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Main(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestEngineUsageErrorsExit2WithOneLine(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"acp without an agent", []string{"acp"}, `give the agent's command after "--"`},
		{"acp agent not found", []string{"acp", "--", "no-such-agent-corral"}, `agent command "no-such-agent-corral"`},
		{"acp negative grace", []string{"acp", "--grace=-1s", "--", "true"}, "--grace -1s is negative"},
		{"acp unknown backend", []string{"acp", "--backend", "nowhere://x", "--", "true"}, `backend "nowhere://x": `},
		{"mcp unknown backend", []string{"mcp", "--backend", "nowhere://x"}, `backend "nowhere://x": `},
		{"mcp bad max output", []string{"mcp", "--max-output", "0"}, "--max-output 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := corral(t, "", tc.args...)
			assert.Truef(t, code == 2, "exit %d, want 2; stderr %q", code, errOut)
			assert.Truef(t, out == "", "stdout %q, want nothing", out)
			assert.Truef(t, strings.Count(errOut, "\n") == 1 && strings.HasPrefix(errOut, "corral: ") && strings.Contains(errOut, tc.want), "stderr %q, want one line corral: ... %q", errOut, tc.want)
		})
	}
}

// TestLimitsLines: backends and doctor say which limits a backend
// enforces, or none and why, in one line.
func TestLimitsLines(t *testing.T) {
	all := []string{env.LimitMemory, env.LimitCPUs, env.LimitPids}
	assert.Equal(t, "memory, cpus, pids", limitsSummary(env.Capabilities{Limits: all}))
	assert.Equal(t, "memory, cpus, pids (a cgroup v1 per process tree, under /a /b /c)",
		limitsSummary(env.Capabilities{Limits: all, LimitsNote: "a cgroup v1 per process tree, under /a /b /c"}), "with all enforced, the note says how")
	assert.Equal(t, "none: no cgroup v2 here", limitsSummary(env.Capabilities{LimitsNote: "no cgroup v2 here"}))
	assert.Equal(t, "none: this backend enforces no per-process limit", limitsSummary(env.Capabilities{}))
	assert.Equal(t, "memory, pids; not cpus: no cpu controller", limitsSummary(env.Capabilities{Limits: []string{env.LimitMemory, env.LimitPids}, LimitsNote: "no cpu controller"}))

	// A plugin that states its capabilities, and one that does not.
	assert.Contains(t, backendDetails(backendEntry{Name: "x", Capabilities: &env.Capabilities{Limits: all}, Limits: limitsSummary(env.Capabilities{Limits: all})}),
		"limits: memory, cpus, pids")

	// An open target, as the daemon reports it; a gone one is not asked.
	now := time.Now()
	p := backendProbe(registry.BackendInfo{Target: "docker://web", Name: "docker://web", OpenedAt: now, LimitsNote: "the container's own limits apply"}, now)
	assert.Contains(t, p.Detail, "limits: none: the container's own limits apply")
	p = backendProbe(registry.BackendInfo{Target: "local", Name: "local", OpenedAt: now, Limits: all}, now)
	assert.Contains(t, p.Detail, "limits: memory, cpus, pids")
	p = backendProbe(registry.BackendInfo{Target: "docker-image://img", Health: registry.BackendHealth{Condition: env.ConditionGone}}, now)
	assert.NotContains(t, p.Detail, "limits")

	// Every built-in backend has its line; local's is what it enforces.
	entries, err := listBackends(t.Context())
	require.NoError(t, err)
	for _, e := range entries {
		if e.Kind != "builtin" {
			continue
		}
		require.NotEmpty(t, e.Limits, e.Name)
		if e.Name == "local" {
			assert.True(t, e.Limits == "memory, cpus, pids" || strings.HasPrefix(e.Limits, "none: ") || strings.Contains(e.Limits, "; not "), "local: %q", e.Limits)
		}
	}
}
