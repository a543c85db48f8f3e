package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/registry"
)

// sendQueue bounds what waits to be written to one browser; a browser
// that falls this far behind is disconnected (it reloads and gets the
// list afresh) rather than holding the hub back.
const sendQueue = 1024

// writeTimeout bounds one write to a browser.
const writeTimeout = 10 * time.Second

// actionTimeout bounds an action; a kill takes the grace and the
// verification.
const actionTimeout = 2 * time.Minute

// clientMsg is any message from the browser; Type says which fields count.
type clientMsg struct {
	Type      string `json:"type"`
	SessionID string `json:"sessionId"`
	// Offset: subscribe_output, the byte offset to follow from.
	Offset int64 `json:"offset"`
	// Line: send_stdin, the line to send (a newline, or Enter on a
	// terminal, is added).
	Line string `json:"line"`
	// SessionIDs: stats_history, the processes whose samples to send.
	SessionIDs []string `json:"sessionIds"`
}

// Server-to-browser messages about one process.
type (
	outputMsg struct {
		Type      string `json:"type"` // "output"
		SessionID string `json:"sessionId"`
		// Offset is the byte offset of Data's first byte in the output.
		Offset int64 `json:"offset"`
		// Data is base64 (JSON's encoding of bytes): output need not be
		// UTF-8.
		Data []byte `json:"data"`
		// Omitted bytes are missing at byte OmittedAt of Data: the part
		// between the buffer's head and tail.
		Omitted   int64 `json:"omitted,omitempty"`
		OmittedAt int   `json:"omittedAt,omitempty"`
	}
	outputEndMsg struct {
		Type      string  `json:"type"` // "output_end"
		SessionID string  `json:"sessionId"`
		Session   Session `json:"session"`
	}
	resultMsg struct {
		Type      string `json:"type"` // "<action>_result"
		SessionID string `json:"sessionId"`
		Success   bool   `json:"success"`
		Message   string `json:"message"`
		// Forced (kill and force_kill): SIGKILL was needed.
		Forced *bool `json:"forced,omitempty"`
	}
	errorMsg struct {
		Type      string `json:"type"` // "error"
		SessionID string `json:"sessionId,omitempty"`
		Message   string `json:"message"`
	}
)

// conn is one browser's WebSocket.
type conn struct {
	s   *Server
	ws  *websocket.Conn
	out chan []byte

	ctx    context.Context // done when the connection ends
	cancel context.CancelFunc
	wg     sync.WaitGroup // actions and the output follower

	subMu     sync.Mutex
	subCancel context.CancelFunc // the output subscription, if any
}

func newConn(s *Server, ws *websocket.Conn) *conn {
	return &conn{s: s, ws: ws, out: make(chan []byte, sendQueue)}
}

// send queues v for the browser; a browser too slow to keep up is
// disconnected.
func (c *conn) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		c.s.log.Error("encode message", "err", err)
		return
	}
	select {
	case c.out <- b:
	default:
		c.s.log.Warn("browser too slow; disconnecting it")
		c.cancel()
	}
}

func (c *conn) serve(parent context.Context) {
	c.ctx, c.cancel = context.WithCancel(parent)
	defer c.cancel()
	c.s.hub.join(c.ctx, c)
	defer c.s.hub.leave(c)

	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	err := c.readLoop()
	c.cancel()
	c.wg.Wait()
	<-writerDone
	var ce websocket.CloseError
	switch {
	case errors.As(err, &ce):
		// The browser closed, or the read limit did (1009).
	case parent.Err() != nil:
		c.ws.Close(websocket.StatusGoingAway, "the daemon is stopping")
	default:
		c.ws.Close(websocket.StatusNormalClosure, "")
	}
}

func (c *conn) writeLoop() {
	for {
		select {
		case <-c.ctx.Done():
			return
		case b := <-c.out:
			wctx, cancel := context.WithTimeout(c.ctx, writeTimeout)
			err := c.ws.Write(wctx, websocket.MessageText, b)
			cancel()
			if err != nil {
				c.cancel()
				return
			}
		}
	}
}

func (c *conn) readLoop() error {
	for {
		typ, data, err := c.ws.Read(c.ctx)
		if err != nil {
			return err
		}
		if typ != websocket.MessageText {
			c.send(errorMsg{Type: "error", Message: "send JSON text messages"})
			continue
		}
		var m clientMsg
		if err := json.Unmarshal(data, &m); err != nil {
			c.send(errorMsg{Type: "error", Message: fmt.Sprintf("malformed message (%v): send a JSON object with a \"type\"", err)})
			continue
		}
		c.handle(m)
	}
}

// actions maps a message type to what it does; each answers with one
// "<type>_result".
var actions = map[string]func(c *conn, ctx context.Context, m clientMsg) resultMsg{
	"kill":       func(c *conn, ctx context.Context, m clientMsg) resultMsg { return c.kill(ctx, m.SessionID, false) },
	"force_kill": func(c *conn, ctx context.Context, m clientMsg) resultMsg { return c.kill(ctx, m.SessionID, true) },
	"send_stdin": (*conn).sendStdin,
	"remove":     (*conn).remove,
}

func (c *conn) handle(m clientMsg) {
	if m.Type == "unsubscribe_output" {
		c.unsubscribe()
		return
	}
	if m.Type == "stats_history" {
		if msg := checkStatsHistory(m.SessionIDs); msg != "" {
			c.send(errorMsg{Type: "error", Message: msg})
			return
		}
		c.wg.Go(func() { c.statsHistory(c.ctx, m.SessionIDs) })
		return
	}
	_, isAction := actions[m.Type]
	if !isAction && m.Type != "subscribe_output" {
		c.send(errorMsg{Type: "error", SessionID: m.SessionID, Message: fmt.Sprintf("unknown message type %q: want subscribe_output, unsubscribe_output, stats_history, kill, force_kill, send_stdin or remove", m.Type)})
		return
	}
	if m.SessionID == "" {
		c.send(errorMsg{Type: "error", Message: fmt.Sprintf("%s needs a sessionId", m.Type)})
		return
	}
	if m.Type == "subscribe_output" {
		c.subscribe(m.SessionID, m.Offset)
		return
	}
	// Actions run beside the reader: a kill takes its grace period, and
	// the browser may ask for more meanwhile.
	c.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), actionTimeout)
		defer cancel()
		res := actions[m.Type](c, ctx, m)
		res.Type, res.SessionID = m.Type+"_result", m.SessionID
		c.send(res)
	})
}

// kill ends the tree: TERM, grace, KILL (or KILL at once when force),
// verified, through the Service's kill, which checks each process's
// identity (PID and start time) before it signals it.
func (c *conn) kill(ctx context.Context, id string, force bool) resultMsg {
	res, err := c.s.cfg.Service.Kill(ctx, id, registry.KillOptions{Force: force, Grace: c.s.cfg.KillGrace})
	forced := res.Signal == env.SIGKILL || res.Escalated
	out := resultMsg{Forced: &forced}
	switch {
	case errors.Is(err, registry.ErrNotFound):
		out.Message = fmt.Sprintf("no process %s: it was never started here or has been removed", id)
	case res.Unreachable:
		out.Message = fmt.Sprintf("%s was NOT killed: %s; the kill is pending and runs when the backend answers again", id, res.Detail)
	case err != nil:
		out.Message = err.Error()
	case len(res.Survivors) > 0:
		out.Message = fmt.Sprintf("%d processes of %s survived the kill (PIDs %v)", len(res.Survivors), id, res.Survivors)
	case res.AlreadyExited && res.Ended == 0:
		out.Success = true
		out.Message = fmt.Sprintf("%s had already ended (%s); nothing was left to kill", id, statusWords(res.Status))
	default:
		out.Success = true
		how := "SIGKILL at once"
		switch {
		case !force && res.Escalated:
			how = fmt.Sprintf("%s, then SIGKILL after the grace period", res.Signal)
		case !force:
			how = res.Signal.String() + " was enough"
		}
		out.Message = fmt.Sprintf("killed %s: %d processes ended (%s)", id, res.Ended, how)
	}
	return out
}

func statusWords(st *env.ExitStatus) string {
	if st == nil {
		return "no exit status"
	}
	return st.String()
}

func (c *conn) sendStdin(ctx context.Context, m clientMsg) resultMsg {
	if strings.ContainsAny(m.Line, "\r\n") {
		return resultMsg{Message: "send one line at a time: the line must not contain a newline"}
	}
	if err := c.s.cfg.Service.Submit(ctx, m.SessionID, m.Line); err != nil {
		return resultMsg{Message: err.Error()}
	}
	return resultMsg{Success: true, Message: fmt.Sprintf("sent %d bytes and Enter", len(m.Line))}
}

func (c *conn) remove(ctx context.Context, m clientMsg) resultMsg {
	if err := c.s.cfg.Service.Remove(ctx, m.SessionID); err != nil {
		return resultMsg{Message: err.Error()}
	}
	return resultMsg{Success: true, Message: "removed " + m.SessionID}
}

// subscribe follows id's output from offset, replacing the previous
// subscription: the page shows one process at a time.
func (c *conn) subscribe(id string, offset int64) {
	c.unsubscribe()
	ctx, cancel := context.WithCancel(c.ctx)
	c.subMu.Lock()
	c.subCancel = cancel
	c.subMu.Unlock()
	c.wg.Go(func() {
		defer cancel()
		pr, err := c.s.cfg.Live.Follow(ctx, id, max(offset, 0), func(pr registry.PollResult) bool {
			c.send(outputMsg{Type: "output", SessionID: id, Offset: pr.Next - int64(len(pr.Output)),
				Data: pr.Output, Omitted: pr.OmittedBytes, OmittedAt: pr.OmittedAt})
			return ctx.Err() == nil
		})
		switch {
		case ctx.Err() != nil:
		case err != nil:
			c.send(errorMsg{Type: "error", SessionID: id, Message: err.Error()})
		case pr.State.Final():
			c.send(outputEndMsg{Type: "output_end", SessionID: id, Session: c.s.hub.session(pr.Info, time.Now())})
		}
	})
}

func (c *conn) unsubscribe() {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	if c.subCancel != nil {
		c.subCancel()
		c.subCancel = nil
	}
}
