package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/registry"
)

// TestWaitingInputThroughTheCLI: a command that asks for input where
// nobody can answer it is named by corral run in one line on stderr, ps
// shows it waiting (with how), and corral send answers it, after which the
// run ends on its own with the command's exit code. The daemon watches with
// its default quiet spell (1.5 s).
func TestWaitingInputThroughTheCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the corral binary")
	}
	bin := buildCorral(t)
	h := newDaemonHome(t, bin)

	// --stdin from a pipe that stays open and empty: nothing here answers.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "run", "--stdin", "--timeout", "60s", "--", "sh", "-c", `printf 'Name? '; read n; echo "hello $n"; exit 3`)
	cmd.Env = h.env
	stdinW, err := cmd.StdinPipe()
	require.NoError(t, err)
	defer stdinW.Close()
	var out, errOut syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	require.Eventually(t, func() bool { return strings.Contains(errOut.String(), "waits for input") }, 20*time.Second, 50*time.Millisecond,
		"corral run names the wait; stderr %q", errOut.String())
	var said []string
	for _, l := range strings.Split(errOut.String(), "\n") {
		if strings.Contains(l, "waits for input") {
			said = append(said, l)
		}
	}
	require.Len(t, said, 1, "one line says it: %q", errOut.String())
	line := said[0]
	assert.Contains(t, line, `waits for input (pipe) at "Name? "`)
	id := strings.Fields(strings.TrimPrefix(line, "corral: run: "))[0]
	require.True(t, strings.HasPrefix(id, "proc_"), "the line names the process: %q", line)

	var list []registry.Info
	require.NoError(t, json.Unmarshal([]byte(h.mustRun("ps", "--json")), &list))
	var in *registry.Info
	for i := range list {
		if list[i].ID == id {
			in = &list[i]
		}
	}
	require.NotNil(t, in, "ps lists %s", id)
	require.NotNil(t, in.WaitingInput, "ps --json says it waits: %+v", in)
	assert.Equal(t, "pipe", in.WaitingInput.Kind)
	assert.Contains(t, h.mustRun("ps"), "running (foreground), waiting for input (pipe)")

	h.mustRun("send", id, "corral")
	select {
	case err := <-done:
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, 3, ee.ExitCode(), "stdout %q stderr %q", out.String(), errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("corral run did not end after the answer; stdout %q stderr %q", out.String(), errOut.String())
	}
	assert.Contains(t, out.String(), "hello corral")
}

// syncBuffer is a bytes.Buffer safe to read while a process writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
