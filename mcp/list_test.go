package mcp

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/internal/shellquote"
	"github.com/corralhq/corral/registry"
)

// TestListShowsCommandsAsTyped: a command the CLI stored word by word
// ('sh' '-c' '…') is listed as a person types it; one typed as a string
// is listed unchanged.
func TestListShowsCommandsAsTyped(t *testing.T) {
	srv, cs := connect(t, nil)
	words, err := srv.reg.Start(context.Background(), registry.StartOptions{
		Command: shellquote.Join([]string{"sh", "-c", "sleep 60; echo x", "it's"})})
	require.NoError(t, err)
	typed, err := srv.reg.Start(context.Background(), registry.StartOptions{Command: `sleep 60 && echo "done"`})
	require.NoError(t, err)

	var res ListResult
	call(t, cs, "process", map[string]any{"action": "list"}, &res)
	shown := map[string]string{}
	for _, p := range res.Processes {
		shown[p.ID] = p.Command
	}
	assert.Equal(t, `sh -c 'sleep 60; echo x' "it's"`, shown[words.ID])
	assert.Equal(t, `sleep 60 && echo "done"`, shown[typed.ID])
}
