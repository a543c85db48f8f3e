package mcp

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/errclass"
	"github.com/corralhq/corral/registry"
)

// TestEveryClassHasAToolHint walks every error class: a class added to
// errclass and not to toolHints fails here. The tool error is the
// registry's message, without its package prefix, plus the hint.
func TestEveryClassHasAToolHint(t *testing.T) {
	for _, c := range errclass.Classes() {
		hint, ok := toolHints[c]
		if !assert.True(t, ok, "class %v: no entry in toolHints (\"\" for none)", c) {
			continue
		}
		want := "poll: op: test"
		if hint != "" {
			want += " (" + hint + ")"
		}
		assert.Equal(t, want, toolError("poll", fmt.Errorf("registry: op: %w", errclass.New(c, "test"))).Error(), "class %v", c)
	}
}

// TestToolErrorsSpeakMCP: the hints of real registry errors name the
// tool's actions, never the CLI's commands, and an error of two classes
// (not running because the process exited) gets the registry's hint.
func TestToolErrorsSpeakMCP(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("registry: no such process: %w", registry.ErrNotFound), "process action=list shows the ids that are tracked"},
		{fmt.Errorf("registry: write x: %w: %w", registry.ErrNotRunning, env.ErrExited), "the process has ended"},
		{&registry.AmbiguousError{Prefix: "abcd", Candidates: []string{"proc_abcd00000000", "proc_abcd00000001"}}, "give the full id"},
	}
	for _, tc := range cases {
		got := toolError("poll", tc.err).Error()
		assert.Contains(t, got, tc.want, "%v", tc.err)
		assert.NotContains(t, got, "registry: ", "%v", tc.err)
	}

	_, cs := connect(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "process", Arguments: map[string]any{"action": "poll", "id": "proc_000000000000"}})
	require.NoError(t, err)
	text := res.Content[0].(*sdk.TextContent).Text
	assert.True(t, res.IsError, "unknown id: %q", text)
	assert.Contains(t, text, "proc_000000000000")
	assert.Contains(t, text, "action=list")
	assert.NotContains(t, text, "corral ", "the tool's words, not the CLI's")
}

// TestToolErrorsCappedByMaxOutput: a tool error reaches the model as output
// does, so the output cap applies to it; and an error about a long command
// never carries the command back.
func TestToolErrorsCappedByMaxOutput(t *testing.T) {
	_, cs := connect(t, nil) // MaxOutput 1000
	long := "cat > f <<'EOF'\n" + strings.Repeat("a line of a long heredoc\n", 20000) + "EOF\n"
	for _, args := range []map[string]any{
		{"command": long, "dir": "/nonexistent/dir"},
		{"command": long, "background": true, "dir": "/nonexistent/dir"},
		{"command": long, "ttl": true, "background": true},
		{"command": long, "env": map[string]any{"BAD NAME": strings.Repeat("v", 100000)}},
		{"action": "kill", "id": strings.Repeat("f", 100000)},
	} {
		tool := "terminal"
		if _, ok := args["action"]; ok {
			tool = "process"
		}
		msg := callErr(t, cs, tool, args)
		assert.LessOrEqual(t, len(msg), 1100, "%s: %.300q", tool, msg)
		assert.NotContains(t, msg, strings.Repeat("a line of a long heredoc\n", 3), "%s: the error repeats its input", tool)
		assert.NotContains(t, msg, strings.Repeat("v", 200), "%s: the error repeats its input", tool)
	}
	// A handler error over the cap keeps its head and tail.
	h := capErrors(100, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
		return nil, nil, fmt.Errorf("head %s tail", strings.Repeat("x", 10000))
	})
	_, _, err := h(context.Background(), nil, struct{}{})
	msg := err.Error()
	assert.LessOrEqual(t, len(msg), 150, "capped error %q", msg)
	assert.True(t, strings.HasPrefix(msg, "head") && strings.HasSuffix(msg, "tail"), "capped error %q keeps head and tail", msg)
	assert.Contains(t, msg, "omitted")
}
