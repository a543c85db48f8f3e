package acpterm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	acp "github.com/coder/acp-go-sdk"
)

// DefaultMaxMessage bounds one JSON-RPC message (one line) the proxy
// accepts from either side: file contents travel in messages, so it is
// generous, but a peer that never sends a newline cannot make the proxy
// hold unbounded memory.
const DefaultMaxMessage = 64 << 20

// closeTimeout bounds the kill of the terminals left running when one side
// goes away.
const closeTimeout = 60 * time.Second

// Proxy relays ACP between an editor and an agent: every message passes
// byte for byte, except the editor's initialize request, in which the
// proxy sets clientCapabilities.terminal, and the agent's terminal/*
// requests, which Terminals answers and the editor never sees.
type Proxy struct {
	// Terminals answers the agent's terminal requests. Required.
	Terminals *Terminals
	// Logger receives diagnostics; default slog.Default().
	Logger *slog.Logger
	// MaxMessage bounds one message in bytes; default DefaultMaxMessage.
	MaxMessage int
}

// Streams are the four ends the proxy joins: what the editor sends and
// where its replies go, the agent's stdin and stdout.
type Streams struct {
	EditorIn  io.Reader
	EditorOut io.Writer
	AgentIn   io.WriteCloser
	AgentOut  io.Reader
}

// Ended says why Run returned.
type Ended int

const (
	// EditorEnded: the editor closed its side (or writing to it failed).
	EditorEnded Ended = iota + 1
	// AgentEnded: the agent closed its stdout (it exited) or stopped
	// reading its stdin.
	AgentEnded
	// ContextDone: Run's context ended first.
	ContextDone
)

func (e Ended) String() string {
	switch e {
	case EditorEnded:
		return "editor disconnected"
	case AgentEnded:
		return "agent exited"
	case ContextDone:
		return "stopped"
	}
	return fmt.Sprintf("Ended(%d)", int(e))
}

// Run relays until the editor or the agent goes away, or ctx ends. Before
// it returns it closes AgentIn (the agent reads end of file, as if the
// editor had closed it), ends the terminal requests in flight and kills
// every terminal the agent created and did not release. The goroutine
// reading the side that did not end returns when its reader does: end the
// agent, or close the editor's stream.
func (p *Proxy) Run(ctx context.Context, s Streams) (Ended, error) {
	if p.Terminals == nil {
		return 0, errors.New("acpterm: Proxy.Terminals is required")
	}
	log := p.Logger
	if log == nil {
		log = slog.Default()
	}
	max := p.MaxMessage
	if max <= 0 {
		max = DefaultMaxMessage
	}
	runCtx, cancel := context.WithCancel(ctx)
	r := &relay{
		terms:    p.Terminals,
		log:      log,
		max:      max,
		ctx:      runCtx,
		editor:   &lockedWriter{w: s.EditorOut},
		agent:    &lockedWriter{w: s.AgentIn},
		inflight: make(map[string]context.CancelFunc),
		ended:    make(chan Ended, 2),
	}
	go r.fromEditor(s.EditorIn)
	go r.fromAgent(s.AgentOut)

	var why Ended
	select {
	case why = <-r.ended:
	case <-ctx.Done():
		why = ContextDone
	}
	cancel()
	if err := s.AgentIn.Close(); err != nil {
		log.Debug("acp proxy: close the agent's stdin", "err", err)
	}
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	r.handlers.Wait()
	kctx, kcancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer kcancel()
	if n := len(p.Terminals.Active()); n > 0 {
		log.Info("acp proxy: killing the terminals left running", "why", why.String(), "terminals", n)
	}
	return why, p.Terminals.Close(kctx)
}

// relay is one Run's state.
type relay struct {
	terms *Terminals
	log   *slog.Logger
	max   int
	ctx   context.Context

	editor, agent *lockedWriter

	handlers sync.WaitGroup
	mu       sync.Mutex
	inflight map[string]context.CancelFunc // terminal requests, by canonical id
	stopped  bool                          // Run is returning: no new handler

	ended chan Ended
}

// envelope is the part of a JSON-RPC message the proxy routes on.
type envelope struct {
	// ID is absent (nil) on a notification, "null" when given as null.
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

func (r *relay) fromEditor(in io.Reader) {
	r.readLines(in, "editor", r.editor, func(line []byte, env envelope) {
		if env.Method == "initialize" && env.ID != nil {
			if changed, err := advertiseTerminal(line); err == nil {
				line = changed
			} else {
				r.log.Warn("acp proxy: initialize relayed without the terminal capability", "err", err)
			}
		}
		if err := r.agent.writeLine(line); err != nil {
			r.end(AgentEnded, "write to the agent", err)
		}
	})
	r.end(EditorEnded, "", nil)
}

func (r *relay) fromAgent(out io.Reader) {
	r.readLines(out, "agent", r.agent, func(line []byte, env envelope) {
		switch {
		case strings.HasPrefix(env.Method, "terminal/") && env.ID != nil && string(env.ID) != "null":
			r.serveTerminal(env)
			return
		case env.Method == "$/cancel_request" && env.ID == nil && r.cancelTerminal(env.Params):
			return
		}
		if err := r.editor.writeLine(line); err != nil {
			r.end(EditorEnded, "write to the editor", err)
		}
	})
	r.end(AgentEnded, "", nil)
}

func (r *relay) end(why Ended, what string, err error) {
	if err != nil {
		r.log.Debug("acp proxy: "+what, "err", err)
	}
	select {
	case r.ended <- why:
	default:
	}
}

// readLines calls relay for every message from in, a line at a time,
// until in ends. A line that is not a JSON-RPC message is answered on
// back with an error and not relayed.
func (r *relay) readLines(in io.Reader, side string, back *lockedWriter, relay func([]byte, envelope)) {
	br := bufio.NewReaderSize(in, 64<<10)
	for {
		line, err := readLine(br, r.max)
		if len(bytes.TrimSpace(line)) > 0 {
			r.route(line, side, back, relay)
		}
		if errors.Is(err, errLineTooLong) {
			r.reply(back, nil, &acp.RequestError{Code: -32600, Message: fmt.Sprintf(
				"Invalid request: corral acp proxy: the %s sent a message longer than %d bytes; it was not relayed", side, r.max)}, nil)
			continue
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				r.log.Debug("acp proxy: read from the "+side, "err", err)
			}
			return
		}
	}
}

func (r *relay) route(line []byte, side string, back *lockedWriter, relay func([]byte, envelope)) {
	var env envelope
	err := json.Unmarshal(line, &env)
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		r.log.Warn("acp proxy: dropped a line that is not JSON", "from", side, "err", err)
		r.reply(back, nil, &acp.RequestError{Code: -32700, Message: fmt.Sprintf(
			"Parse error: corral acp proxy: the %s sent a line that is not JSON (%v); it was not relayed", side, err)}, nil)
		return
	}
	if err == nil && bytes.TrimLeft(line, " \t\r")[0] != '{' {
		err = errors.New("not an object")
	}
	if err != nil {
		r.log.Warn("acp proxy: dropped JSON that is not a JSON-RPC message", "from", side, "err", err)
		r.reply(back, nil, &acp.RequestError{Code: -32600, Message: fmt.Sprintf(
			"Invalid request: corral acp proxy: the %s sent JSON that is not a JSON-RPC message object (%v); it was not relayed", side, err)}, nil)
		return
	}
	relay(line, env)
}

// serveTerminal answers one terminal request of the agent, concurrently:
// wait_for_exit blocks until the command ends.
func (r *relay) serveTerminal(env envelope) {
	key := idKey(env.ID)
	ctx, cancel := context.WithCancel(r.ctx)
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		cancel()
		r.reply(r.agent, env.ID, requestError(CodeInternalError, env.Method+": corral acp proxy is shutting down (the editor went away)"), nil)
		return
	}
	r.inflight[key] = cancel
	r.handlers.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.handlers.Done()
		defer func() {
			r.mu.Lock()
			delete(r.inflight, key)
			r.mu.Unlock()
			cancel()
		}()
		result, rerr := r.terminalCall(ctx, env.Method, env.Params)
		if rerr == nil && ctx.Err() != nil {
			rerr = &acp.RequestError{Code: -32800, Message: "Request cancelled"}
		}
		r.reply(r.agent, env.ID, rerr, result)
	}()
}

// cancelTerminal cancels the terminal request a $/cancel_request names,
// and reports whether it named one (then it is not relayed: the editor
// never saw that request).
func (r *relay) cancelTerminal(params json.RawMessage) bool {
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if json.Unmarshal(params, &p) != nil || p.RequestID == nil {
		return false
	}
	r.mu.Lock()
	cancel := r.inflight[idKey(p.RequestID)]
	r.mu.Unlock()
	if cancel == nil {
		return false
	}
	cancel()
	return true
}

func (r *relay) terminalCall(ctx context.Context, method string, params json.RawMessage) (any, *acp.RequestError) {
	t := r.terms
	switch method {
	case acp.ClientMethodTerminalCreate:
		return call(ctx, method, params, (*acp.CreateTerminalRequest).Validate, t.CreateTerminal)
	case acp.ClientMethodTerminalOutput:
		return call(ctx, method, params, (*acp.TerminalOutputRequest).Validate, t.TerminalOutput)
	case acp.ClientMethodTerminalWaitForExit:
		return call(ctx, method, params, (*acp.WaitForTerminalExitRequest).Validate, t.WaitForTerminalExit)
	case acp.ClientMethodTerminalKill:
		return call(ctx, method, params, (*acp.KillTerminalRequest).Validate, t.KillTerminal)
	case acp.ClientMethodTerminalRelease:
		return call(ctx, method, params, (*acp.ReleaseTerminalRequest).Validate, t.ReleaseTerminal)
	}
	return nil, &acp.RequestError{Code: -32601, Message: fmt.Sprintf(
		"Method not found: corral acp proxy serves terminal/create, terminal/output, terminal/wait_for_exit, terminal/kill and terminal/release, not %s", method)}
}

// call decodes and checks params, then runs f: the SDK's own handling of
// a request, which the proxy does by hand because it relays everything
// else untouched.
func call[P, R any](ctx context.Context, method string, raw json.RawMessage, validate func(*P) error, f func(context.Context, P) (R, error)) (any, *acp.RequestError) {
	var p P
	if len(raw) == 0 || string(raw) == "null" {
		return nil, invalidParams(method + ": params are missing")
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, invalidParams(fmt.Sprintf("%s: params: %v", method, err))
	}
	if err := validate(&p); err != nil {
		return nil, invalidParams(fmt.Sprintf("%s: %v", method, err))
	}
	res, err := f(ctx, p)
	if err != nil {
		var re *acp.RequestError
		if errors.As(err, &re) {
			return nil, re
		}
		return nil, requestError(CodeInternalError, fmt.Sprintf("%s: %v", method, err))
	}
	return res, nil
}

// reply writes a response with id (nil: null, for a message whose id
// could not be read) and the error or else the result (nil: {}).
func (r *relay) reply(w *lockedWriter, id json.RawMessage, rerr *acp.RequestError, result any) {
	if id == nil {
		id = json.RawMessage("null")
	}
	msg := struct {
		JSONRPC string            `json:"jsonrpc"`
		ID      json.RawMessage   `json:"id"`
		Result  any               `json:"result,omitempty"`
		Error   *acp.RequestError `json:"error,omitempty"`
	}{JSONRPC: "2.0", ID: id, Error: rerr}
	if rerr == nil {
		msg.Result = result
		if result == nil {
			msg.Result = struct{}{}
		}
	}
	b, err := json.Marshal(msg)
	if err != nil {
		b, _ = json.Marshal(struct {
			JSONRPC string            `json:"jsonrpc"`
			ID      json.RawMessage   `json:"id"`
			Error   *acp.RequestError `json:"error"`
		}{"2.0", id, requestError(CodeInternalError, "corral acp proxy: encode the response: "+err.Error())})
	}
	if err := w.writeLine(b); err != nil {
		r.log.Debug("acp proxy: reply not delivered", "err", err)
	}
}

// advertiseTerminal returns the initialize request line with
// params.clientCapabilities.terminal set to true, everything else kept.
func advertiseTerminal(line []byte) ([]byte, error) {
	var msg map[string]json.RawMessage
	if err := json.Unmarshal(line, &msg); err != nil {
		return nil, err
	}
	params := map[string]json.RawMessage{}
	if raw := msg["params"]; len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &params); err != nil {
			return nil, fmt.Errorf("initialize params: %w", err)
		}
	}
	caps := map[string]json.RawMessage{}
	if raw := params["clientCapabilities"]; len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &caps); err != nil {
			return nil, fmt.Errorf("initialize clientCapabilities: %w", err)
		}
	}
	caps["terminal"] = json.RawMessage("true")
	var err error
	if params["clientCapabilities"], err = json.Marshal(caps); err != nil {
		return nil, err
	}
	if msg["params"], err = json.Marshal(params); err != nil {
		return nil, err
	}
	return json.Marshal(msg)
}

// idKey is a request id in one spelling, so that a $/cancel_request
// finds the request whatever whitespace it used.
func idKey(id json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, id) != nil {
		return string(id)
	}
	return b.String()
}

var errLineTooLong = errors.New("line too long")

// readLine returns the next line of br with its newline. A line that fits
// br's buffer is returned without a copy: it is valid until the next read.
// A line longer than max is consumed and dropped with errLineTooLong. At
// the end of the stream it returns the unterminated rest with io.EOF.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	chunk, err := br.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return chunk, err
	}
	line := append([]byte(nil), chunk...)
	for errors.Is(err, bufio.ErrBufferFull) {
		chunk, err = br.ReadSlice('\n')
		if len(line)+len(chunk) > max+1 {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err != nil {
				return nil, err
			}
			return nil, errLineTooLong
		}
		line = append(line, chunk...)
	}
	return line, err
}

// lockedWriter writes whole lines, one at a time: two goroutines answer
// on the same stream.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (lw *lockedWriter) writeLine(line []byte) error {
	if len(line) == 0 || line[len(line)-1] != '\n' {
		line = append(line[:len(line):len(line)], '\n')
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	_, err := lw.w.Write(line)
	return err
}
