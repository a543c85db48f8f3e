// Package acptest holds the pieces ACP tests build their editors and agents
// from: an editor with no terminals of its own (every terminal request must
// be answered by corral), the boilerplate of an agent, and a tape that
// records the bytes a stream carried, for byte-for-byte relay checks.
package acptest

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	acp "github.com/coder/acp-go-sdk"
)

// Editor is an acp.Client without terminals: a terminal request that
// reaches it fails the test, since corral should have answered it. It keeps
// the session updates it receives.
type Editor struct {
	T testing.TB

	mu      sync.Mutex
	updates []acp.SessionNotification
}

// Updates returns the session updates received so far.
func (e *Editor) Updates() []acp.SessionNotification {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]acp.SessionNotification(nil), e.updates...)
}

func (e *Editor) SessionUpdate(_ context.Context, n acp.SessionNotification) error {
	e.mu.Lock()
	e.updates = append(e.updates, n)
	e.mu.Unlock()
	return nil
}

func (e *Editor) ReadTextFile(context.Context, acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	return acp.ReadTextFileResponse{}, nil
}

func (e *Editor) WriteTextFile(context.Context, acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	return acp.WriteTextFileResponse{}, nil
}

func (e *Editor) RequestPermission(context.Context, acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	return acp.RequestPermissionResponse{}, nil
}

func (e *Editor) reached(method string) error {
	if e.T != nil {
		e.T.Errorf("the editor received %s: corral should have answered it", method)
	}
	return &acp.RequestError{Code: -32601, Message: "this editor has no terminals"}
}

func (e *Editor) CreateTerminal(context.Context, acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	return acp.CreateTerminalResponse{}, e.reached("terminal/create")
}

func (e *Editor) KillTerminal(context.Context, acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	return acp.KillTerminalResponse{}, e.reached("terminal/kill")
}

func (e *Editor) TerminalOutput(context.Context, acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	return acp.TerminalOutputResponse{}, e.reached("terminal/output")
}

func (e *Editor) ReleaseTerminal(context.Context, acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	return acp.ReleaseTerminalResponse{}, e.reached("terminal/release")
}

func (e *Editor) WaitForTerminalExit(context.Context, acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	return acp.WaitForTerminalExitResponse{}, e.reached("terminal/wait_for_exit")
}

// AgentBase answers the acp.Agent methods a test agent does not care
// about; embed it and write Initialize, NewSession and Prompt.
type AgentBase struct{}

func (AgentBase) Authenticate(context.Context, acp.AuthenticateRequest) (acp.AuthenticateResponse, error) {
	return acp.AuthenticateResponse{}, nil
}

func (AgentBase) Cancel(context.Context, acp.CancelNotification) error { return nil }

func (AgentBase) CloseSession(context.Context, acp.CloseSessionRequest) (acp.CloseSessionResponse, error) {
	return acp.CloseSessionResponse{}, nil
}

func (AgentBase) ListSessions(context.Context, acp.ListSessionsRequest) (acp.ListSessionsResponse, error) {
	return acp.ListSessionsResponse{}, nil
}

func (AgentBase) ResumeSession(context.Context, acp.ResumeSessionRequest) (acp.ResumeSessionResponse, error) {
	return acp.ResumeSessionResponse{}, nil
}

func (AgentBase) SetSessionConfigOption(context.Context, acp.SetSessionConfigOptionRequest) (acp.SetSessionConfigOptionResponse, error) {
	return acp.SetSessionConfigOptionResponse{}, nil
}

func (AgentBase) SetSessionMode(context.Context, acp.SetSessionModeRequest) (acp.SetSessionModeResponse, error) {
	return acp.SetSessionModeResponse{}, nil
}

// Tape records the bytes written to it. It is safe for concurrent use.
type Tape struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (tp *Tape) Write(p []byte) (int, error) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.buf.Write(p)
}

// String returns everything recorded.
func (tp *Tape) String() string {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.buf.String()
}

// Lines returns the complete (newline-terminated) lines recorded so far.
func (tp *Tape) Lines() []string { return Lines([]byte(tp.String())) }

// Lines splits b into its newline-terminated lines, without the newlines;
// an unterminated rest is left out.
func Lines(b []byte) []string {
	s := string(b)
	i := strings.LastIndexByte(s, '\n')
	if i < 0 {
		return nil
	}
	return strings.Split(s[:i], "\n")
}
