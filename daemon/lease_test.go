package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/registry"
)

// A foreground Run's connection is its lease: a client that vanishes
// without a word (killed with -9: its socket just closes) has its tree
// killed by the daemon.
func TestRunLeaseEndsWithTheConnection(t *testing.T) {
	c, paths := startDaemon(t)
	conn, err := net.Dial("unix", paths.Socket)
	require.NoError(t, err)
	defer conn.Close()
	body, err := json.Marshal(RunRequest{StartRequest: StartRequest{Command: "echo up; sleep 61.5", Labels: map[string]string{"t": "lease"}}})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, "http://corral"+APIVersion+"/run", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	require.NoError(t, req.Write(conn))

	// Read up to the started event, then go away.
	rd := bufio.NewReader(conn)
	resp, err := http.ReadResponse(rd, req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var id string
	sc := bufio.NewScanner(resp.Body)
	for id == "" && sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var in registry.Info
			if json.Unmarshal([]byte(data), &in) == nil && in.ID != "" {
				id = in.ID
			}
		}
	}
	require.NotEmpty(t, id, "no started event")
	ctx := context.Background()
	got, err := c.Get(ctx, id)
	require.NoError(t, err)
	require.True(t, got.Foreground)
	require.Equal(t, registry.StateRunning, got.State)

	require.NoError(t, conn.Close())
	var end registry.Info
	require.Eventually(t, func() bool {
		end, err = c.Get(ctx, id)
		return err == nil && end.State.Final() && !end.TreeRunning
	}, generous, 10*time.Millisecond, "the tree outlived its client's connection")
	assert.Equal(t, registry.StateKilled, end.State)
}
