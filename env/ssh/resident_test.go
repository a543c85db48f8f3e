package ssh

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env/ssh/sshtest"
)

// TestExecLibRunsOnResidentShells checks that ExecLib's calls reuse
// resident shells (in a call's subshell $$ is the resident's PID), that
// the library is loaded in them, that concurrent calls beyond the residents
// still run (on sessions of their own), and that after sshd restarts (the
// residents die with the connection) calls run again on new residents.
func TestExecLibRunsOnResidentShells(t *testing.T) {
	srv := sshtest.Start(t)
	tr := dialServer(t, srv, serverOptions(t, srv))
	const lib = "greet() { echo \"hello $1\"; }\n"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	call := func(line string) (string, int) {
		t.Helper()
		var out, errb bytes.Buffer
		code, err := tr.ExecLib(ctx, lib, line, "", &out, &errb)
		if err != nil {
			t.Fatalf("ExecLib(%q): %v (stderr %q)", line, err, errb.String())
		}
		return out.String(), code
	}
	if out, code := call("greet world; exit 3"); out != "hello world\n" || code != 3 {
		t.Fatalf("ExecLib = %q, %d; want the library's greeting and exit 3", out, code)
	}
	first, _ := call("echo $$")
	for range 5 {
		if pid, _ := call("echo $$"); pid != first {
			t.Fatalf("calls in turn ran in shells %s and %s: no resident reused", strings.TrimSpace(first), strings.TrimSpace(pid))
		}
	}

	// More concurrent calls than residents (MaxSessions/2 = 5): all run.
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			var out bytes.Buffer
			code, err := tr.ExecLib(ctx, lib, "sleep 0.2; greet "+string(rune('a'+i)), "", &out, nil)
			if err != nil || code != 0 || out.String() != "hello "+string(rune('a'+i))+"\n" {
				t.Errorf("concurrent ExecLib %d = %q, %d, %v", i, out.String(), code, err)
			}
		})
	}
	wg.Wait()

	srv.Restart(t)
	require.NoError(t, tr.WaitConnected(ctx))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var out bytes.Buffer
		code, err := tr.ExecLib(ctx, lib, "greet again", "", &out, nil)
		require.NoError(c, err)
		assert.Equal(c, 0, code, "exit code")
		assert.Equal(c, "hello again\n", out.String())
	}, 30*time.Second, 50*time.Millisecond, "waiting for ExecLib to work again after sshd restarted")
	if pid, _ := call("echo $$"); pid == first {
		t.Fatalf("the resident from before the restart (%s) still answers", strings.TrimSpace(first))
	}
}
