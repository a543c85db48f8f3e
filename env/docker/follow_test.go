package docker

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

// countFollowers counts the follow scripts running in the container: shells
// whose command line calls corral_follow, and their children, which carry
// CORRAL_FOLLOW. The patterns do not match their own text.
const countFollowers = `n=0; for f in $(grep -l -e 'corral_follo[w] ' /proc/[0-9]*/cmdline 2>/dev/null; grep -l -s -z '^CORRAL_FOLLO[W]=' /proc/[0-9]*/environ 2>/dev/null); do n=$((n+1)); done; echo $n`

// TestFollowEndsInsideTheContainer: docker keeps an exec running after its
// client goes away, so a reader that closes while its follow runs must end
// the follow's script inside the container, even one blocked writing
// output nobody reads. And the process's output still streams to the next
// reader, from its offset.
func TestFollowEndsInsideTheContainer(t *testing.T) {
	cli := requireEngine(t)
	name := startPlainContainer(t, cli)
	ctx := testContext(t)
	e, err := Open(ctx, SchemeContainer+name, Options{Logger: discardLogger()})
	require.NoError(t, err)
	defer e.Close()
	tr := NewTransport(cli, name, "")
	followers := func() int {
		var out strings.Builder
		_, err := tr.Exec(ctx, countFollowers, nil, &out, nil)
		require.NoError(t, err)
		n, err := strconv.Atoi(strings.TrimSpace(out.String()))
		require.NoError(t, err, "count %q", out.String())
		return n
	}

	// A chatty process: a reader that stops reading leaves its follow
	// blocked in a write.
	p, err := e.Start(ctx, env.Spec{Command: `while :; do head -c 65536 /dev/zero | tr '\0' x; sleep 0.01; done`})
	require.NoError(t, err)
	defer func() {
		_ = p.Signal(ctx, env.SIGKILL)
		_, _ = p.Wait(ctx)
	}()
	for i := range 3 {
		r, err := p.Output(ctx, int64(i)*(1<<20))
		require.NoError(t, err)
		buf := make([]byte, 1<<20)
		_, err = io.ReadFull(r, buf)
		require.NoError(t, err, "reader %d", i)
		require.Equal(t, strings.Repeat("x", len(buf)), string(buf), "reader %d", i)
		require.Greater(t, followers(), 0, "reader %d: no follow in the container", i)
		time.Sleep(200 * time.Millisecond) // the follow fills the stream and blocks
		require.NoError(t, r.Close())
		require.Eventually(t, func() bool { return followers() == 0 }, 20*time.Second, 50*time.Millisecond,
			fmt.Sprintf("reader %d closed: its follow still runs in the container", i))
	}
}
