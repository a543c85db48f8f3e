package integration

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	acp "github.com/coder/acp-go-sdk"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/internal/testing/acptest"
)

// copyRelayEnv makes the test binary (see TestMain) a byte-copying relay in
// front of the scripted agent: the least any proxy process can cost.
const copyRelayEnv = "CORRAL_TEST_COPY_RELAY"

// runCopyRelay starts the scripted agent (this binary again) and copies
// stdin to it and its stdout back, untouched.
func runCopyRelay() int {
	self, err := os.Executable()
	if err != nil {
		return 1
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), copyRelayEnv+"=", acpAgentEnv+"=1")
	cmd.Stderr = os.Stderr
	in, err1 := cmd.StdinPipe()
	out, err2 := cmd.StdoutPipe()
	if err1 != nil || err2 != nil || cmd.Start() != nil {
		return 1
	}
	go func() {
		_, _ = io.Copy(in, os.Stdin)
		_ = in.Close()
	}()
	_, _ = io.Copy(os.Stdout, out)
	_ = cmd.Wait()
	return 0
}

// BenchmarkACPRelay is the round trip of a message corral acp only relays
// (session/set_mode and its response), editor to agent and back: through
// the proxy (corral) against the same agent process connected directly
// to the editor (baseline), and behind a relay that only copies bytes
// (copyrelay). Both ends are the SDK over OS pipes.
func BenchmarkACPRelay(b *testing.B) {
	bin := buildCorral(b)
	agentArgv, environ := acpAgentCommand(b, "")
	b.Run("corral", func(b *testing.B) {
		args := append([]string{"acp", "--"}, agentArgv...)
		benchACPRoundTrip(b, exec.Command(bin, args...), environ)
	})
	// The floor of any relaying process: the same agent behind a process
	// that copies bytes both ways and looks at none of them.
	b.Run("copyrelay", func(b *testing.B) {
		benchACPRoundTrip(b, exec.Command(agentArgv[0]), append(environ, copyRelayEnv+"=1"))
	})
	b.Run("baseline", func(b *testing.B) {
		benchACPRoundTrip(b, exec.Command(agentArgv[0], agentArgv[1:]...), environ)
	})
}

func benchACPRoundTrip(b *testing.B, cmd *exec.Cmd, environ []string) {
	cmd.Env = environ
	stdin, err := cmd.StdinPipe()
	require.NoError(b, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(b, err)
	require.NoError(b, cmd.Start())
	defer func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	conn := acp.NewClientSideConnection(&acptest.Editor{}, stdin, io.Reader(stdout))
	conn.SetLogger(slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := conn.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}); err != nil {
		require.FailNow(b, fmt.Sprint(err))
	}
	sess, err := conn.NewSession(ctx, acp.NewSessionRequest{Cwd: "/", McpServers: []acp.McpServer{}})
	require.NoError(b, err)
	req := acp.SetSessionModeRequest{SessionId: sess.SessionId, ModeId: "code"}
	for b.Loop() {
		_, err := conn.SetSessionMode(ctx, req)
		require.NoError(b, err)
	}
}
