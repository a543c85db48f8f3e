package mcp

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
)

// TestTerminalLimits: terminal's memory, cpus and pids reach the backend;
// list and poll say them back in the same words; bad values are refused
// naming the argument, and a backend that cannot enforce a limit refuses
// the command with its reason.
func TestTerminalLimits(t *testing.T) {
	limited := &envtest.Fake{Caps: env.Capabilities{Limits: []string{env.LimitMemory, env.LimitCPUs, env.LimitPids}}}
	plain := &envtest.Fake{Caps: env.Capabilities{LimitsNote: "no cgroup here"}}
	_, _, cs := connectTo(t, func(context.Context, string) (env.Environment, error) { return limited, nil },
		nil, slog.New(slog.DiscardHandler))

	var res TerminalResult
	call(t, cs, "terminal", map[string]any{"command": "serve", "background": true, "memory": "100M", "cpus": 1.5, "pids": 512}, &res)
	require.NotNil(t, limited.Last().Spec().Limits)
	assert.Equal(t, env.Limits{Memory: 100 << 20, CPUs: 1.5, Pids: 512}, *limited.Last().Spec().Limits)
	assert.Equal(t, "memory 100M, cpus 1.5, pids 512", res.Limits)

	raw := rawCall(t, cs, "process", map[string]any{"action": "poll", "id": res.ID})
	assert.Equal(t, "memory 100M, cpus 1.5, pids 512", raw["limits"])
	var list ListResult
	call(t, cs, "process", map[string]any{"action": "list"}, &list)
	require.Len(t, list.Processes, 1)
	assert.Equal(t, "memory 100M, cpus 1.5, pids 512", list.Processes[0].Limits)
	assert.Nil(t, list.Processes[0].Info.Limits, "said once, at the top")

	// Without limits, nothing is said of them.
	call(t, cs, "terminal", map[string]any{"command": "other", "background": true}, &res)
	raw = rawCall(t, cs, "process", map[string]any{"action": "poll", "id": res.ID})
	assert.NotContains(t, raw, "limits")
	assert.Nil(t, limited.Last().Spec().Limits)

	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"memory": "lots"}, `"memory" "lots" is not a size`},
		{map[string]any{"memory": "1M"}, `"memory" "1M" must be at least 6M`},
		{map[string]any{"memory": strings.Repeat("9x", 1000)}, `"memory" "9x9x`},
		{map[string]any{"cpus": 0}, `"cpus" 0: give a number of cores above 0`},
		{map[string]any{"cpus": 2000}, `"cpus" 2000 must be between 0.01 and 1024 cores`},
		{map[string]any{"pids": 3}, `"pids" 3 must be at least 10`},
		{map[string]any{"pids": -1}, `"pids" -1: give a number of tasks above 0`},
	} {
		args := map[string]any{"command": "serve", "background": true}
		for k, v := range tc.args {
			args[k] = v
		}
		msg := callErr(t, cs, "terminal", args)
		assert.Contains(t, msg, tc.want, "%v", tc.args)
		assert.Less(t, len(msg), 200, "%v: a huge value is not echoed", tc.args)
	}
	assert.Len(t, limited.Procs(), 2, "nothing started for a bad value")

	_, _, cs = connectTo(t, func(context.Context, string) (env.Environment, error) { return plain, nil },
		nil, slog.New(slog.DiscardHandler))
	msg := callErr(t, cs, "terminal", map[string]any{"command": "make", "memory": "2G"})
	assert.Contains(t, msg, "cannot enforce --memory: no cgroup here")
	assert.Empty(t, plain.Procs())
}

// TestTerminalSchemaDescribesLimits: the tool's schema names the three
// arguments with their types and says the limit is hard.
func TestTerminalSchemaDescribesLimits(t *testing.T) {
	_, cs := connect(t, nil)
	tools, err := cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	for _, tool := range tools.Tools {
		if tool.Name != "terminal" {
			continue
		}
		b, err := json.Marshal(tool.InputSchema)
		require.NoError(t, err)
		var schema struct {
			Properties map[string]struct {
				Type        any    `json:"type"`
				Types       any    `json:"types"`
				Description string `json:"description"`
			} `json:"properties"`
		}
		require.NoError(t, json.Unmarshal(b, &schema))
		for name, typ := range map[string]string{"memory": "string", "cpus": "number", "pids": "integer"} {
			p, ok := schema.Properties[name]
			require.True(t, ok, "no %q in %s", name, b)
			assert.Contains(t, toJSON(t, p.Type)+toJSON(t, p.Types), typ, name)
			assert.NotEmpty(t, p.Description, name)
		}
		assert.Contains(t, schema.Properties["memory"].Description, "OOM kill of the tree")
		return
	}
	t.Fatal("no terminal tool")
}

func toJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
