package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/corralhq/corral/internal/testing/acptest"
)

// The scripted ACP agent: the test binary re-executed with
// acpAgentEnv=1 (see TestMain) speaks ACP on stdin/stdout, written with
// the SDK as any Go agent would be. Each prompt's text is a JSON script of
// terminal calls; the agent makes them, in order, through its client (the
// corral acp proxy) and answers with one agent_message_chunk holding the
// JSON results. With acpTapeEnv=DIR it records every byte it read and
// wrote in DIR/agent-in and DIR/agent-out, for the byte-for-byte checks.
const (
	acpAgentEnv = "CORRAL_TEST_ACP_AGENT"
	acpTapeEnv  = "CORRAL_TEST_ACP_TAPE"
)

// acpStep is one terminal call of a script.
type acpStep struct {
	Op      string            `json:"op"` // create, output, wait, kill, release, race
	As      string            `json:"as,omitempty"`
	T       string            `json:"t,omitempty"` // the terminal, by its "as" name
	ID      string            `json:"id,omitempty"`
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	Limit   *int              `json:"limit,omitempty"`
	// AfterMS is race's timer: wait_for_exit against it; when the timer
	// wins, kill, read the final output and release (ACP's timeout
	// pattern).
	AfterMS int `json:"after_ms,omitempty"`
}

// acpStepResult is what one step returned.
type acpStepResult struct {
	Error    *acp.RequestError                `json:"error,omitempty"`
	ID       string                           `json:"id,omitempty"`
	Output   *acp.TerminalOutputResponse      `json:"output,omitempty"`
	Exit     *acp.WaitForTerminalExitResponse `json:"exit,omitempty"`
	TimerWon bool                             `json:"timer_won,omitempty"`
}

type scriptedAgent struct {
	acptest.AgentBase
	conn *acp.AgentSideConnection
	mu   sync.Mutex
	init acp.InitializeRequest
}

func runACPAgent() int {
	var in io.Reader = os.Stdin
	var out io.Writer = os.Stdout
	if dir := os.Getenv(acpTapeEnv); dir != "" {
		inTape, err1 := os.Create(filepath.Join(dir, "agent-in"))
		outTape, err2 := os.Create(filepath.Join(dir, "agent-out"))
		if err := errors.Join(err1, err2); err != nil {
			fmt.Fprintln(os.Stderr, "acp agent:", err)
			return 1
		}
		defer inTape.Close()
		defer outTape.Close()
		in = io.TeeReader(in, inTape)
		out = io.MultiWriter(outTape, out)
	}
	a := &scriptedAgent{}
	a.conn = acp.NewAgentSideConnection(a, out, in)
	<-a.conn.Done()
	return 0
}

func (a *scriptedAgent) Initialize(_ context.Context, p acp.InitializeRequest) (acp.InitializeResponse, error) {
	a.mu.Lock()
	a.init = p
	a.mu.Unlock()
	return acp.InitializeResponse{ProtocolVersion: acp.ProtocolVersionNumber}, nil
}

func (a *scriptedAgent) NewSession(context.Context, acp.NewSessionRequest) (acp.NewSessionResponse, error) {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return acp.NewSessionResponse{SessionId: acp.SessionId("sess-" + hex.EncodeToString(b))}, nil
}

func (a *scriptedAgent) Prompt(ctx context.Context, p acp.PromptRequest) (acp.PromptResponse, error) {
	if len(p.Prompt) != 1 || p.Prompt[0].Text == nil {
		return acp.PromptResponse{}, errors.New("want one text block holding a JSON script")
	}
	var script []acpStep
	if err := json.Unmarshal([]byte(p.Prompt[0].Text.Text), &script); err != nil {
		return acp.PromptResponse{}, fmt.Errorf("script: %w", err)
	}
	a.mu.Lock()
	terminal := a.init.ClientCapabilities.Terminal
	a.mu.Unlock()
	if !terminal {
		return acp.PromptResponse{}, errors.New("the client did not advertise terminals")
	}
	names := map[string]string{}
	results := make([]acpStepResult, 0, len(script))
	for _, st := range script {
		results = append(results, a.step(ctx, p.SessionId, names, st))
	}
	b, _ := json.Marshal(results)
	if err := a.conn.SessionUpdate(ctx, acp.SessionNotification{SessionId: p.SessionId, Update: acp.UpdateAgentMessageText(string(b))}); err != nil {
		return acp.PromptResponse{}, err
	}
	return acp.PromptResponse{StopReason: acp.StopReasonEndTurn}, nil
}

func (a *scriptedAgent) step(ctx context.Context, sid acp.SessionId, names map[string]string, st acpStep) acpStepResult {
	id := st.ID
	if st.T != "" {
		id = names[st.T]
	}
	var res acpStepResult
	var err error
	switch st.Op {
	case "create":
		req := acp.CreateTerminalRequest{SessionId: sid, Command: st.Command, Args: st.Args, OutputByteLimit: st.Limit}
		for k, v := range st.Env {
			req.Env = append(req.Env, acp.EnvVariable{Name: k, Value: v})
		}
		if st.Cwd != "" {
			req.Cwd = &st.Cwd
		}
		var resp acp.CreateTerminalResponse
		if resp, err = a.conn.CreateTerminal(ctx, req); err == nil {
			res.ID = resp.TerminalId
			names[st.As] = resp.TerminalId
		}
	case "output":
		var resp acp.TerminalOutputResponse
		if resp, err = a.conn.TerminalOutput(ctx, acp.TerminalOutputRequest{SessionId: sid, TerminalId: id}); err == nil {
			res.Output = &resp
		}
	case "wait":
		var resp acp.WaitForTerminalExitResponse
		if resp, err = a.conn.WaitForTerminalExit(ctx, acp.WaitForTerminalExitRequest{SessionId: sid, TerminalId: id}); err == nil {
			res.Exit = &resp
		}
	case "kill":
		_, err = a.conn.KillTerminal(ctx, acp.KillTerminalRequest{SessionId: sid, TerminalId: id})
	case "release":
		_, err = a.conn.ReleaseTerminal(ctx, acp.ReleaseTerminalRequest{SessionId: sid, TerminalId: id})
	case "race":
		res, err = a.race(ctx, sid, id, st.AfterMS)
	default:
		err = fmt.Errorf("unknown op %q", st.Op)
	}
	if err != nil {
		var re *acp.RequestError
		if !errors.As(err, &re) {
			re = &acp.RequestError{Code: -1, Message: err.Error()}
		}
		res.Error = re
	}
	return res
}

// race is ACP's recommended timeout pattern: wait_for_exit against a
// timer; when the timer wins, kill; then the final output, then release.
func (a *scriptedAgent) race(ctx context.Context, sid acp.SessionId, id string, afterMS int) (acpStepResult, error) {
	var res acpStepResult
	wctx, cancel := context.WithTimeout(ctx, time.Duration(afterMS)*time.Millisecond)
	exit, err := a.conn.WaitForTerminalExit(wctx, acp.WaitForTerminalExitRequest{SessionId: sid, TerminalId: id})
	timerWon := wctx.Err() != nil
	cancel()
	if err != nil && !timerWon {
		return res, err
	}
	if !timerWon {
		res.Exit = &exit
	} else {
		res.TimerWon = true
		if _, err := a.conn.KillTerminal(ctx, acp.KillTerminalRequest{SessionId: sid, TerminalId: id}); err != nil {
			return res, fmt.Errorf("kill: %w", err)
		}
	}
	out, err := a.conn.TerminalOutput(ctx, acp.TerminalOutputRequest{SessionId: sid, TerminalId: id})
	if err != nil {
		return res, fmt.Errorf("output: %w", err)
	}
	res.Output = &out
	if _, err := a.conn.ReleaseTerminal(ctx, acp.ReleaseTerminalRequest{SessionId: sid, TerminalId: id}); err != nil {
		return res, fmt.Errorf("release: %w", err)
	}
	return res, nil
}
