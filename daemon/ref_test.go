package daemon

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/registry"
)

// The re-attach reference is backend-private (it names the state
// directory): no answer carries it unless the list asks with ref=1.
func TestRefOnlyWhenAsked(t *testing.T) {
	c, _ := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	in, err := c.Start(ctx, registry.StartOptions{Command: "sleep 30", Labels: map[string]string{"t": "ref"}})
	require.NoError(t, err)
	require.True(t, in.Detached, "the local backend detaches background processes")
	assert.Nil(t, in.Ref, "start")

	got, err := c.Get(ctx, in.ID)
	require.NoError(t, err)
	assert.Nil(t, got.Ref, "get")

	labels := map[string]string{"t": "ref"}
	plain, err := c.List(ctx, registry.ListOptions{Labels: labels})
	require.NoError(t, err)
	require.Len(t, plain, 1)
	assert.Nil(t, plain[0].Ref, "list")

	asked, err := c.List(ctx, registry.ListOptions{Labels: labels, WithRef: true})
	require.NoError(t, err)
	require.Len(t, asked, 1)
	require.NotNil(t, asked[0].Ref, "list with ref=1")
	assert.Equal(t, "local", asked[0].Ref.Env)
	assert.NotEmpty(t, asked[0].Ref.Data)
}
