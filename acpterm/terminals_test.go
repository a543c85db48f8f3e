package acpterm

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	acp "github.com/coder/acp-go-sdk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
	"github.com/corralhq/corral/internal/testing/proctest"
	"github.com/corralhq/corral/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newRegistry returns a registry on the local backend, closed (with its
// processes killed) when the test ends.
func newRegistry(t testing.TB) *registry.Registry {
	t.Helper()
	stateDir := t.TempDir()
	reg, err := registry.New(registry.Config{
		Open: func(context.Context, string) (env.Environment, error) {
			return local.New(local.Options{StateDir: stateDir})
		},
		DefaultGrace: 2 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = reg.KillAll(context.Background(), registry.KillAllOptions{})
		_ = reg.Close()
	})
	return reg
}

func newTerminals(t testing.TB) (*Terminals, *registry.Registry) {
	t.Helper()
	reg := newRegistry(t)
	terms, err := New(Config{Service: reg, Grace: 500 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = terms.Close(context.Background()) })
	return terms, reg
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

const session = acp.SessionId("sess-1")

func create(t *testing.T, terms *Terminals, req acp.CreateTerminalRequest) string {
	t.Helper()
	if req.SessionId == "" {
		req.SessionId = session
	}
	resp, err := terms.CreateTerminal(ctxT(t), req)
	require.NoError(t, err)
	require.NotEmpty(t, resp.TerminalId)
	return resp.TerminalId
}

func waitExit(t *testing.T, terms *Terminals, id string) acp.WaitForTerminalExitResponse {
	t.Helper()
	resp, err := terms.WaitForTerminalExit(ctxT(t), acp.WaitForTerminalExitRequest{SessionId: session, TerminalId: id})
	require.NoError(t, err)
	return resp
}

func output(t *testing.T, terms *Terminals, id string) acp.TerminalOutputResponse {
	t.Helper()
	resp, err := terms.TerminalOutput(ctxT(t), acp.TerminalOutputRequest{SessionId: session, TerminalId: id})
	require.NoError(t, err)
	return resp
}

// requestError asserts err is a JSON-RPC error with code whose message
// holds every one of wants.
func requireRequestError(t *testing.T, err error, code int, wants ...string) {
	t.Helper()
	var re *acp.RequestError
	require.True(t, errors.As(err, &re), "want *acp.RequestError, got %T %v", err, err)
	assert.Equal(t, code, re.Code, "code of %q", re.Message)
	for _, w := range wants {
		assert.Contains(t, re.Message, w)
	}
}

func TestArgsReachTheProgramExactly(t *testing.T) {
	terms, _ := newTerminals(t)
	args := []string{"%s|\n", "a b", "'quoted'", `"dq"`, "$HOME", "", "x;y && z", "new\nline", "*", "-n", "é€"}
	id := create(t, terms, acp.CreateTerminalRequest{Command: "printf", Args: args})
	st := waitExit(t, terms, id)
	require.NotNil(t, st.ExitCode)
	assert.Equal(t, 0, *st.ExitCode)
	assert.Nil(t, st.Signal)
	var want strings.Builder
	for _, a := range args[1:] {
		want.WriteString(a + "|\n")
	}
	out := output(t, terms, id)
	assert.Equal(t, want.String(), out.Output)
	assert.False(t, out.Truncated)
	require.NotNil(t, out.ExitStatus)
	assert.Equal(t, 0, *out.ExitStatus.ExitCode)
}

func TestCommandWithoutArgsIsAShellLine(t *testing.T) {
	terms, _ := newTerminals(t)
	id := create(t, terms, acp.CreateTerminalRequest{Command: "echo $((40+2)) | tr 4 X; exit 3"})
	st := waitExit(t, terms, id)
	require.NotNil(t, st.ExitCode)
	assert.Equal(t, 3, *st.ExitCode)
	assert.Equal(t, "X2\n", output(t, terms, id).Output)
}

func TestEnvCwdAndLabels(t *testing.T) {
	terms, reg := newTerminals(t)
	dir := t.TempDir()
	id := create(t, terms, acp.CreateTerminalRequest{
		Command: "sh", Args: []string{"-c", `printf '%s %s' "$GREETING" "$(pwd)"`},
		Env: []acp.EnvVariable{{Name: "GREETING", Value: "hi there"}}, Cwd: &dir,
	})
	waitExit(t, terms, id)
	assert.Equal(t, "hi there "+dir, output(t, terms, id).Output)
	info, err := reg.Get(ctxT(t), id)
	require.NoError(t, err)
	assert.Equal(t, string(session), info.Labels[SessionLabel])
	assert.Equal(t, ViaValue, info.Labels[ViaLabel])
}

func TestOutputByteLimitCutsAtACharacterBoundary(t *testing.T) {
	terms, _ := newTerminals(t)
	// "€" is 3 bytes: E2 82 AC. 20 of them are 60 bytes; a limit of 10 cuts
	// inside the fourth from the end, so 9 bytes (3 characters) remain.
	line := strings.Repeat("€", 20)
	limit := 10
	id := create(t, terms, acp.CreateTerminalRequest{Command: "printf", Args: []string{"%s", line}, OutputByteLimit: &limit})
	waitExit(t, terms, id)
	out := output(t, terms, id)
	assert.True(t, out.Truncated)
	assert.True(t, utf8.ValidString(out.Output))
	assert.Equal(t, "€€€", out.Output)

	// Within the limit: everything, not truncated.
	big := 60
	id2 := create(t, terms, acp.CreateTerminalRequest{Command: "printf", Args: []string{"%s", line}, OutputByteLimit: &big})
	waitExit(t, terms, id2)
	out2 := output(t, terms, id2)
	assert.False(t, out2.Truncated)
	assert.Equal(t, line, out2.Output)

	// A limit of 0 keeps nothing of a non-empty output.
	zero := 0
	id3 := create(t, terms, acp.CreateTerminalRequest{Command: "printf", Args: []string{"x"}, OutputByteLimit: &zero})
	waitExit(t, terms, id3)
	out3 := output(t, terms, id3)
	assert.True(t, out3.Truncated)
	assert.Empty(t, out3.Output)
}

func TestOutputByteLimitFollowsARunningCommand(t *testing.T) {
	terms, _ := newTerminals(t)
	limit := 12
	// Numbered lines, one at a time: every terminal/output must return the
	// end of what has been printed so far, never more than the limit.
	id := create(t, terms, acp.CreateTerminalRequest{Command: `i=0; while [ $i -lt 60 ]; do i=$((i+1)); echo "l$i"; sleep 0.01; done`, OutputByteLimit: &limit})
	for {
		out := output(t, terms, id)
		assert.LessOrEqual(t, len(out.Output), limit)
		if out.ExitStatus != nil {
			assert.True(t, out.Truncated)
			assert.True(t, strings.HasSuffix(out.Output, "l59\nl60\n"), "final output %q", out.Output)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestTailOutput(t *testing.T) {
	euro := "€" // E2 82 AC
	cases := []struct {
		name      string
		res       registry.PollResult
		since     int64
		limit     int
		final     bool
		want      string
		truncated bool
	}{
		{name: "all", res: registry.PollResult{Output: []byte("abc")}, limit: -1, final: true, want: "abc"},
		{name: "gap keeps what follows it", res: registry.PollResult{Output: []byte("HEADtail"), OmittedBytes: 100, OmittedAt: 4}, limit: -1, final: true, want: "tail", truncated: true},
		{name: "gap then limit", res: registry.PollResult{Output: []byte("HEADtail"), OmittedBytes: 100, OmittedAt: 4}, limit: 2, final: true, want: "il", truncated: true},
		{name: "from a cursor is truncated", res: registry.PollResult{Output: []byte("xyz")}, since: 5, limit: 3, final: true, want: "xyz", truncated: true},
		{name: "cursor inside a character", res: registry.PollResult{Output: []byte(euro[1:] + "ok")}, since: 5, limit: 4, final: true, want: "ok", truncated: true},
		{name: "running holds an incomplete character back", res: registry.PollResult{Output: []byte("ok" + euro[:2])}, limit: -1, want: "ok"},
		{name: "finished returns the incomplete character as is", res: registry.PollResult{Output: []byte("ok" + euro[:2])}, limit: -1, final: true, want: "ok" + euro[:2]},
		{name: "running complete character kept", res: registry.PollResult{Output: []byte("ok" + euro)}, limit: -1, want: "ok" + euro},
		{name: "four-byte character cut", res: registry.PollResult{Output: []byte("a😀b")}, limit: 3, final: true, want: "b", truncated: true},
		{name: "invalid bytes are not held back", res: registry.PollResult{Output: []byte{'a', 0xff}}, limit: -1, want: "a\xff"},
		{name: "a limit cut in bytes that are not UTF-8 keeps them", res: registry.PollResult{Output: []byte{'a', 0xff, 0x80, 0x80}}, limit: 2, final: true, want: "\x80\x80", truncated: true},
		{name: "a limit cut inside a character skips its rest", res: registry.PollResult{Output: []byte("ab" + euro + "z")}, limit: 3, final: true, want: "z", truncated: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, truncated := tailOutput(c.res, c.since, c.limit, c.final)
			assert.Equal(t, c.want, string(got))
			assert.Equal(t, c.truncated, truncated)
		})
	}
}

func TestSignalExitIsReportedByName(t *testing.T) {
	terms, _ := newTerminals(t)
	id := create(t, terms, acp.CreateTerminalRequest{Command: "sh", Args: []string{"-c", "echo bye; kill -TERM $$"}})
	st := waitExit(t, terms, id)
	assert.Nil(t, st.ExitCode)
	require.NotNil(t, st.Signal)
	assert.Equal(t, "SIGTERM", *st.Signal)
	out := output(t, terms, id)
	assert.Equal(t, "bye\n", out.Output)
	require.NotNil(t, out.ExitStatus)
	require.NotNil(t, out.ExitStatus.Signal)
	assert.Equal(t, "SIGTERM", *out.ExitStatus.Signal)
	assert.Nil(t, out.ExitStatus.ExitCode)
}

// stubbornTree is a command that ignores TERM and leaves a setsid escapee
// behind it, both `sleep MARKER`.
func stubbornTree(marker string) acp.CreateTerminalRequest {
	return acp.CreateTerminalRequest{SessionId: session, Command: "sh", Args: []string{"-c",
		`trap "" TERM; setsid sleep ` + marker + ` & sleep ` + marker + ` & echo started; while :; do sleep 0.05; done`}}
}

func TestKillEndsTheTreeAndTheTerminalStaysReadable(t *testing.T) {
	terms, _ := newTerminals(t)
	marker := proctest.Marker()
	proctest.KillOnCleanup(t, marker)
	id := create(t, terms, stubbornTree(marker))
	proctest.WaitRunning(t, marker, 2)

	_, err := terms.KillTerminal(ctxT(t), acp.KillTerminalRequest{SessionId: session, TerminalId: id})
	require.NoError(t, err)
	assert.Empty(t, proctest.Sleepers(marker), "kill returned with the tree still running")

	out := output(t, terms, id)
	assert.Equal(t, "started\n", out.Output)
	require.NotNil(t, out.ExitStatus)
	require.NotNil(t, out.ExitStatus.Signal)
	assert.Equal(t, "SIGKILL", *out.ExitStatus.Signal, "TERM is ignored, so KILL ended it")
	st := waitExit(t, terms, id)
	assert.Equal(t, "SIGKILL", *st.Signal)

	// Killing again is harmless; the terminal is still there until released.
	_, err = terms.KillTerminal(ctxT(t), acp.KillTerminalRequest{SessionId: session, TerminalId: id})
	require.NoError(t, err)
	assert.Equal(t, []string{id}, terms.Active())
}

func TestReleaseKillsAndForgets(t *testing.T) {
	terms, reg := newTerminals(t)
	marker := proctest.Marker()
	proctest.KillOnCleanup(t, marker)
	id := create(t, terms, stubbornTree(marker))
	proctest.WaitRunning(t, marker, 2)

	_, err := terms.ReleaseTerminal(ctxT(t), acp.ReleaseTerminalRequest{SessionId: session, TerminalId: id})
	require.NoError(t, err)
	assert.Empty(t, proctest.Sleepers(marker))
	assert.Empty(t, terms.Active())
	_, err = reg.Get(ctxT(t), id)
	assert.ErrorIs(t, err, registry.ErrNotFound, "release removes the process from corral")

	_, err = terms.TerminalOutput(ctxT(t), acp.TerminalOutputRequest{SessionId: session, TerminalId: id})
	requireRequestError(t, err, CodeResourceNotFound, "unknown terminal", id, "released")
	_, err = terms.ReleaseTerminal(ctxT(t), acp.ReleaseTerminalRequest{SessionId: session, TerminalId: id})
	requireRequestError(t, err, CodeResourceNotFound, "unknown terminal")
}

func TestCloseKillsWhatWasNotReleased(t *testing.T) {
	terms, reg := newTerminals(t)
	marker := proctest.Marker()
	proctest.KillOnCleanup(t, marker)
	running := create(t, terms, stubbornTree(marker))
	released := create(t, terms, acp.CreateTerminalRequest{Command: "true"})
	waitExit(t, terms, released)
	_, err := terms.ReleaseTerminal(ctxT(t), acp.ReleaseTerminalRequest{SessionId: session, TerminalId: released})
	require.NoError(t, err)
	proctest.WaitRunning(t, marker, 2)

	require.NoError(t, terms.Close(ctxT(t)))
	proctest.RequireGone(t, marker)
	info, err := reg.Get(ctxT(t), running)
	require.NoError(t, err, "a killed terminal stays listed")
	assert.Equal(t, registry.StateKilled, info.State)

	_, err = terms.CreateTerminal(ctxT(t), acp.CreateTerminalRequest{SessionId: session, Command: "true"})
	requireRequestError(t, err, CodeInternalError, "shut down")
}

func TestBadInputGetsClearErrors(t *testing.T) {
	terms, reg := newTerminals(t)
	neg := -1
	rel := "relative/dir"
	missing := "/nonexistent/corral-acp-test"
	cases := []struct {
		name  string
		req   acp.CreateTerminalRequest
		code  int
		wants []string
	}{
		{"negative limit", acp.CreateTerminalRequest{Command: "true", OutputByteLimit: &neg}, CodeInvalidParams, []string{"outputByteLimit -1 is negative"}},
		{"relative cwd", acp.CreateTerminalRequest{Command: "true", Cwd: &rel}, CodeInvalidParams, []string{`cwd "relative/dir" is not an absolute path`}},
		{"missing cwd", acp.CreateTerminalRequest{Command: "true", Cwd: &missing}, CodeInvalidParams, []string{missing}},
		{"bad env name", acp.CreateTerminalRequest{Command: "true", Env: []acp.EnvVariable{{Name: "A-B", Value: "1"}}}, CodeInvalidParams, []string{`env name "A-B"`}},
		{"NUL in an argument", acp.CreateTerminalRequest{Command: "echo", Args: []string{"a\x00b"}}, CodeInvalidParams, []string{"args[0] contains a NUL byte"}},
		{"blank command", acp.CreateTerminalRequest{Command: "  "}, CodeInvalidParams, []string{"command is empty"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.req.SessionId = session
			_, err := terms.CreateTerminal(ctxT(t), c.req)
			requireRequestError(t, err, c.code, c.wants...)
		})
	}
	assert.Empty(t, terms.Active())
	left, err := reg.List(ctxT(t), registry.ListOptions{All: true})
	require.NoError(t, err)
	assert.Empty(t, left, "a create that failed leaves no process behind")

	_, err = terms.KillTerminal(ctxT(t), acp.KillTerminalRequest{SessionId: session, TerminalId: "proc_000000000000"})
	requireRequestError(t, err, CodeResourceNotFound, `unknown terminal "proc_000000000000"`)

	// A terminal belongs to the session that created it.
	id := create(t, terms, acp.CreateTerminalRequest{Command: "true"})
	_, err = terms.TerminalOutput(ctxT(t), acp.TerminalOutputRequest{SessionId: "other", TerminalId: id})
	requireRequestError(t, err, CodeResourceNotFound, "unknown terminal", `in session "other"`)
}

func TestWaitHonoursItsContext(t *testing.T) {
	terms, _ := newTerminals(t)
	id := create(t, terms, acp.CreateTerminalRequest{Command: "sleep", Args: []string{"30"}})
	ctx, cancel := context.WithTimeout(ctxT(t), 100*time.Millisecond)
	defer cancel()
	_, err := terms.WaitForTerminalExit(ctx, acp.WaitForTerminalExitRequest{SessionId: session, TerminalId: id})
	require.Error(t, err)
}

func TestCommandLine(t *testing.T) {
	assert.Equal(t, "make test", CommandLine("make test", nil))
	assert.Equal(t, `exec 'go' 'test' 'it'\''s'`, CommandLine("go", []string{"test", "it's"}))
}

// The terminals live under one session lease, which Close ends: through
// the daemon, a proxy that dies without Close has its terminals killed
// when the lease drops.
func TestTerminalsLiveUnderASession(t *testing.T) {
	terms, reg := newTerminals(t)
	a := create(t, terms, acp.CreateTerminalRequest{Command: "sleep 60"})
	b := create(t, terms, acp.CreateTerminalRequest{Command: "sleep 60", SessionId: "sess-2"})
	ia, err := reg.Get(ctxT(t), a)
	require.NoError(t, err)
	ib, err := reg.Get(ctxT(t), b)
	require.NoError(t, err)
	require.NotEmpty(t, ia.Session)
	assert.Equal(t, ia.Session, ib.Session, "one lease for the proxy's terminals, whatever their ACP session")
	require.NoError(t, terms.Close(ctxT(t)))
	_, err = reg.Start(ctxT(t), registry.StartOptions{Command: "true", Session: ia.Session})
	assert.ErrorIs(t, err, registry.ErrInvalidOptions, "Close ended the session")
}
