package mcp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/errclass"
	"github.com/corralhq/corral/internal/shellquote"
	"github.com/corralhq/corral/registry"
)

// Process tool actions.
var processActions = []string{"list", "poll", "log", "wait", "kill", "write", "submit", "close", "events", "remove"}

// Defaults of the process tool.
const (
	// DefaultWaitTimeout bounds a wait that sets no timeout, so the
	// agent's turn is never stuck on a process that does not end.
	DefaultWaitTimeout = 60 * time.Second
	// MaxWaitTimeout bounds any wait or events long-poll.
	MaxWaitTimeout = 30 * time.Minute
	// DefaultEventLimit is how many events one events call returns.
	DefaultEventLimit = 50
)

// ProcessInput are the arguments of the process tool.
type ProcessInput struct {
	Action   string            `json:"action" jsonschema:"What to do. list: all tracked processes (with cpu_percent, rss_bytes, peak_rss_bytes and pids of each tree corral has measured, and the limits it runs under). poll: state, cost and new output since the last poll (or since offset). log: lines of the output (offset = first line, 1-based; default the last limit lines). wait: block until the process ends (or timeout), returns its final state and new output; with ready=true, until it is ready instead. kill: end the whole process tree. write: send data to stdin as is. submit: send data plus Enter. close: close stdin (EOF). events: pending events (exits of notify_on_complete processes, watch matches)."`
	ID       string            `json:"id,omitempty" jsonschema:"Process id from terminal (proc_ + 12 hex digits), a unique prefix of at least 4 hex digits, or the name given to terminal. Required for every action except list and events."`
	Data     string            `json:"data,omitempty" jsonschema:"write/submit: the text to send to stdin."`
	Timeout  *Duration         `json:"timeout,omitempty" jsonschema:"wait: how long to wait (default 60 seconds). events: how long to wait for the first event when none is pending (default 0: do not wait). Seconds or a duration string such as \"5m\"."`
	Offset   *int64            `json:"offset,omitempty" jsonschema:"poll: output byte offset to read from (default: where your last poll or wait stopped; 0 = from the start). log: 1-based number of the first line (default: the last limit lines)."`
	Limit    int               `json:"limit,omitempty" jsonschema:"log: number of lines (default 200). events: maximum number of events (default 50)."`
	Signal   string            `json:"signal,omitempty" jsonschema:"kill: first signal, e.g. TERM (default), INT, HUP, or a number; SIGKILL follows after grace (escalate). KILL sends SIGKILL at once."`
	Grace    *Duration         `json:"grace,omitempty" jsonschema:"kill: time between the signal and SIGKILL (default 5 seconds)."`
	Escalate *bool             `json:"escalate,omitempty" jsonschema:"kill: default true: SIGKILL whatever is left after grace. false sends only the signal and waits up to grace, never SIGKILL (HUP to reload a server, an INT that may take its time); the result's still_running says whether the tree outlived grace."`
	Force    *bool             `json:"force,omitempty" jsonschema:"kill: the old name of escalate, still read: false is escalate=false, true the default. It never means SIGKILL at once: use signal KILL for that."`
	Tree     bool              `json:"tree,omitempty" jsonschema:"wait: also wait until every process the command left running (cmd &, a server that daemonised; leftover > 0) has ended. The exit status is the command's own either way."`
	Ready    bool              `json:"ready,omitempty" jsonschema:"wait: wait until the process is ready (its ready_port, ready_pattern or ready_url condition holds; ready_at is set) instead of until it ends. If it ends first, ended_before_ready=true and output holds what it printed."`
	State    []string          `json:"state,omitempty" jsonschema:"list: only processes in these states (starting, recovering, running, exited, killed, timed_out, lost, failed; recovering: being re-attached after a daemon restart). Default: every process."`
	Labels   map[string]string `json:"labels,omitempty" jsonschema:"list: only processes carrying all of these labels, e.g. {\"mcp-session\": \"...\"} for one session's."`
}

// ListResult is the result of action list.
type ListResult struct {
	Processes []ListedProcess `json:"processes"`
}

// ListedProcess is one process of a list, with its last output line.
type ListedProcess struct {
	registry.Info
	Cost
	// Limits are its limits in terminal's words ("memory 2G, cpus 1.5,
	// pids 512"), in place of Info's bytes; absent when it has none.
	Limits string `json:"limits,omitempty"`
	// LastLine is the last line of its output, escapes stripped and
	// capped; "" when it printed nothing.
	LastLine string `json:"last_line,omitempty"`
}

// Cost is what a process's tree costs, from the registry's last sample of
// it, at the top of a list entry or a poll where an agent looks for it
// (registry.Info's nested stats are left out: one place for each figure).
// Absent before the first sample and on a backend that cannot measure;
// once nothing of the tree runs, CPU, RSS and pids are 0 and the peak
// stays.
type Cost struct {
	// CPUPercent is the share of one core over the last interval: 100 is
	// one full core, more on several.
	CPUPercent   *float64 `json:"cpu_percent,omitempty"`
	RSSBytes     *int64   `json:"rss_bytes,omitempty"`
	PeakRSSBytes *int64   `json:"peak_rss_bytes,omitempty"`
	Pids         *int     `json:"pids,omitempty"`
}

// costOf takes the figures out of in: they go at the top (Cost), not
// twice.
func costOf(in *registry.Info) Cost {
	st := in.Stats
	in.Stats = nil
	if st == nil {
		return Cost{}
	}
	return Cost{CPUPercent: &st.CPUPercent, RSSBytes: &st.RSSBytes, PeakRSSBytes: &st.PeakRSSBytes, Pids: &st.Pids}
}

// limitsOf takes the limits out of in, in the words a model gave them
// to terminal ("memory 2G"), not Info's bytes: they go at the top, once.
func limitsOf(in *registry.Info) string {
	l := limitsText(in.Limits)
	in.Limits = nil
	return l
}

// maxLastLine caps ListedProcess.LastLine.
const maxLastLine = 200

// lastLineWait bounds the reads of the last lines of one list.
const lastLineWait = 300 * time.Millisecond

// PollResult is the result of actions poll and wait: registry.Info plus
// the output since the cursor, stripped and capped.
type PollResult struct {
	registry.Info
	Cost
	// Limits: as ListedProcess.Limits.
	Limits       string `json:"limits,omitempty"`
	Output       string `json:"output"`
	Truncated    bool   `json:"truncated,omitempty"`
	OmittedBytes int64  `json:"omitted_bytes,omitempty"`
	// Offset is where Output starts; Next is the offset of the following
	// poll.
	Offset int64 `json:"offset"`
	Next   int64 `json:"next"`
	// WaitTimedOut: wait's timeout elapsed with the process still running.
	WaitTimedOut bool `json:"wait_timed_out,omitempty"`
	// WaitInterrupted: the wait was cut short (the call was cancelled, or
	// the service went away); Output is what had come so far.
	WaitInterrupted string `json:"wait_interrupted,omitempty"`
	// EndedBeforeReady: a wait with ready=true saw the process end before
	// it was ready.
	EndedBeforeReady bool `json:"ended_before_ready,omitempty"`
}

// LogResult is registry.LogResult with stripped lines, capped in bytes.
type LogResult struct {
	registry.LogResult
	// Truncated: lines were left out to respect the byte cap; NextOffset
	// is the line to ask for next.
	Truncated  bool `json:"truncated,omitempty"`
	NextOffset int  `json:"next_offset,omitempty"`
}

// StdinResult is the result of write, submit and close.
type StdinResult struct {
	ID     string         `json:"id"`
	State  registry.State `json:"state"`
	Action string         `json:"action"`
	Bytes  int            `json:"bytes,omitempty"`
}

// EventsResult is the result of action events.
type EventsResult struct {
	Events []registry.Event `json:"events"`
	// Dropped counts events lost because they were not drained in time.
	Dropped int64 `json:"dropped,omitempty"`
}

func (s *Server) process(ctx context.Context, req *sdk.CallToolRequest, in ProcessInput) (*sdk.CallToolResult, any, error) {
	// timeout is the tool's own (it bounds events and wait here); a
	// negative grace is the registry's to refuse, as for every front end.
	if in.Timeout != nil && in.Timeout.D < 0 {
		return nil, nil, fmt.Errorf("\"timeout\" is negative (%s): give seconds >= 0 or a duration string such as \"30s\"", in.Timeout.D)
	}
	if in.Offset != nil && *in.Offset < 0 {
		return nil, nil, fmt.Errorf("\"offset\" is negative (%d): use 0 or more", *in.Offset)
	}
	if in.Ready && in.Action != "wait" {
		return nil, nil, errors.New(`"ready" applies to action wait only`)
	}
	if in.Limit < 0 {
		return nil, nil, fmt.Errorf("\"limit\" is negative (%d): use 1 or more, or leave it out", in.Limit)
	}
	switch in.Action {
	case "list", "events":
	case "":
		return nil, nil, fmt.Errorf(`"action" is required: one of %s`, strings.Join(processActions, ", "))
	default:
		if !contains(processActions, in.Action) {
			return nil, nil, fmt.Errorf("unknown action %q: use one of %s", in.Action, strings.Join(processActions, ", "))
		}
		if in.ID == "" {
			return nil, nil, fmt.Errorf(`action %s needs "id": the process id from terminal or from action list`, in.Action)
		}
	}
	se := s.session(req.Session)
	if se == nil {
		return nil, nil, errors.New("the server is shutting down")
	}
	var (
		out any
		err error
	)
	switch in.Action {
	case "list":
		out, err = s.list(ctx, in)
	case "poll":
		out, err = s.poll(ctx, se, in, false)
	case "wait":
		timeout := DefaultWaitTimeout
		if in.Timeout != nil {
			timeout = min(in.Timeout.D, MaxWaitTimeout)
		}
		if in.Ready && in.Tree {
			return nil, nil, errors.New(`wait: "ready" waits for readiness, "tree" for the end of the tree: give one of them`)
		}
		waitTimedOut := false
		wait := s.reg.Wait
		switch {
		case in.Tree:
			wait = s.reg.WaitTree
		case in.Ready:
			wait = s.reg.WaitReady
		}
		var winfo registry.Info
		winfo, err = wait(ctx, in.ID, max(timeout, time.Millisecond))
		var interrupted string
		switch {
		case errors.Is(err, registry.ErrWaitTimeout):
			waitTimedOut, err = true, nil
		case err != nil && (ctx.Err() != nil || errors.Is(err, registry.ErrClosed)):
			// Whatever cut the wait short, what came so far is the
			// agent's to see.
			interrupted, err = err.Error(), nil
		}
		if err == nil {
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			var pr PollResult
			pr, err = s.poll(pctx, se, in, waitTimedOut)
			cancel()
			pr.WaitInterrupted = interrupted
			pr.EndedBeforeReady = in.Ready && interrupted == "" && !waitTimedOut && winfo.ReadyAt.IsZero()
			out = pr
		}
	case "log":
		out, err = s.logLines(ctx, in)
	case "kill":
		out, err = s.kill(ctx, in)
	case "write", "submit", "close":
		out, err = s.stdin(ctx, in)
	case "events":
		out, err = s.drainEvents(ctx, se, in)
	case "remove":
		out, err = s.remove(ctx, in)
	}
	if err != nil {
		return nil, nil, toolError(in.Action, err)
	}
	return nil, out, nil
}

// list lists the processes in.State and in.Labels select, each with its
// last output line.
func (s *Server) list(ctx context.Context, in ProcessInput) (ListResult, error) {
	opts := registry.ListOptions{All: true, Labels: in.Labels, Ports: true}
	for _, st := range in.State {
		if !registry.State(st).Valid() {
			return ListResult{}, fmt.Errorf("%w: unknown state %q: use starting, recovering, running, exited, killed, timed_out, lost or failed", registry.ErrInvalidOptions, st)
		}
		opts.States = append(opts.States, registry.State(st))
	}
	infos, err := s.reg.List(ctx, opts)
	if err != nil {
		return ListResult{}, err
	}
	res := ListResult{Processes: make([]ListedProcess, 0, len(infos))}
	// A last line of a process that ended before a restart is read back
	// from its sandbox: all of them together get lastLineWait, so that a
	// backend that does not answer never holds the listing up.
	lctx, cancel := context.WithTimeout(ctx, lastLineWait)
	defer cancel()
	for _, info := range infos {
		lp := ListedProcess{Info: info}
		lp.Cost = costOf(&lp.Info)
		lp.Limits = limitsOf(&lp.Info)
		// As ps and the dashboard show it: the words the CLI quoted one
		// by one read as a person types them (the same shell meaning).
		lp.Command = shellquote.Display(info.Command)
		if info.OutputBytes > 0 {
			if lr, err := s.reg.Log(lctx, info.ID, registry.LogOptions{Limit: 1, Strip: true}); err == nil && len(lr.Lines) > 0 {
				lp.LastLine = render([]byte(strings.ToValidUTF8(lr.Lines[0], "\uFFFD")), 0, 0, maxLastLine).Text
			}
		}
		res.Processes = append(res.Processes, lp)
	}
	return res, nil
}

// RemoveResult is the result of action remove.
type RemoveResult struct {
	ID      string `json:"id"`
	Removed bool   `json:"removed"`
}

// remove forgets a finished process.
func (s *Server) remove(ctx context.Context, in ProcessInput) (RemoveResult, error) {
	info, err := s.reg.Get(ctx, in.ID)
	if err != nil {
		return RemoveResult{}, err
	}
	if err := s.reg.Remove(ctx, info.ID); err != nil {
		return RemoveResult{}, err
	}
	return RemoveResult{ID: info.ID, Removed: true}, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// poll reads output since the session's cursor (or in.Offset) and
// advances the cursor.
func (s *Server) poll(ctx context.Context, se *session, in ProcessInput, waitTimedOut bool) (PollResult, error) {
	info, err := s.reg.Get(ctx, in.ID)
	if err != nil {
		return PollResult{}, err
	}
	id := info.ID
	since := se.cursor(id)
	if in.Offset != nil {
		since = *in.Offset
	}
	pr, err := s.reg.Poll(ctx, id, since)
	if err != nil {
		return PollResult{}, err
	}
	out := render(pr.Output, pr.OmittedAt, pr.OmittedBytes, s.cfg.MaxOutput)
	se.setCursor(id, pr.Next)
	cost := costOf(&pr.Info)
	limits := limitsOf(&pr.Info)
	return PollResult{
		Info:         pr.Info,
		Cost:         cost,
		Limits:       limits,
		Output:       out.Text,
		Truncated:    out.Omitted > 0,
		OmittedBytes: out.Omitted,
		Offset:       min(since, pr.Next),
		Next:         pr.Next,
		WaitTimedOut: waitTimedOut,
	}, nil
}

func (s *Server) logLines(ctx context.Context, in ProcessInput) (LogResult, error) {
	opts := registry.LogOptions{Limit: in.Limit, Strip: true}
	if in.Offset != nil {
		if *in.Offset > 1<<31 {
			return LogResult{}, fmt.Errorf("%w: log offset %d is a line number and too large", registry.ErrInvalidOptions, *in.Offset)
		}
		opts.Offset = int(*in.Offset)
	}
	lr, err := s.reg.Log(ctx, in.ID, opts)
	if err != nil {
		return LogResult{}, err
	}
	res := LogResult{LogResult: lr}
	budget := s.cfg.MaxOutput
	for i, line := range lr.Lines {
		line = strings.ToValidUTF8(line, "\uFFFD")
		lr.Lines[i] = line
		budget -= len(line) + 1
		if budget < 0 && i > 0 {
			res.Lines = lr.Lines[:i]
			res.Truncated = true
			res.NextOffset = lr.Offset + i
			break
		}
		if budget < 0 {
			// A single line longer than the cap: keep its head and tail.
			res.Lines[0] = render([]byte(line), 0, 0, s.cfg.MaxOutput).Text
		}
	}
	if res.Lines == nil {
		res.Lines = []string{}
	}
	return res, nil
}

func (s *Server) kill(ctx context.Context, in ProcessInput) (registry.KillResult, error) {
	var opts registry.KillOptions
	if in.Signal != "" {
		sig, err := env.ParseSignal(in.Signal)
		if err != nil {
			return registry.KillResult{}, fmt.Errorf("%w: %w", registry.ErrInvalidOptions, err)
		}
		opts.Signal = sig
	}
	if in.Grace != nil {
		opts.Grace = in.Grace.D
	}
	esc, err := in.escalate()
	if err != nil {
		return registry.KillResult{}, err
	}
	opts.Escalate = esc
	res, err := s.reg.Kill(ctx, in.ID, opts)
	if res.Unreachable {
		// Not a failure of the call: the result says the process was not
		// killed, why, and that the kill is pending.
		return res, nil
	}
	return res, err
}

// escalate is the kill's escalate argument, or force, its old name: agents
// written against the old name sent force=false for "never SIGKILL" and
// force=true for the default, so force keeps exactly that meaning here
// (elsewhere force is SIGKILL at once, which MCP asks with signal KILL).
func (in ProcessInput) escalate() (*bool, error) {
	switch {
	case in.Force == nil:
		return in.Escalate, nil
	case in.Escalate != nil && *in.Escalate != *in.Force:
		return nil, fmt.Errorf("%w: escalate=%t and force=%t contradict each other: force is the old name of escalate, give escalate only", registry.ErrInvalidOptions, *in.Escalate, *in.Force)
	}
	return in.Force, nil
}

func (s *Server) stdin(ctx context.Context, in ProcessInput) (StdinResult, error) {
	var err error
	n := 0
	switch in.Action {
	case "write":
		if in.Data == "" {
			return StdinResult{}, errors.New(`write needs "data": the text to send (use submit to send a line plus Enter, close for EOF)`)
		}
		err, n = s.reg.Write(ctx, in.ID, []byte(in.Data)), len(in.Data)
	case "submit":
		err, n = s.reg.Submit(ctx, in.ID, in.Data), len(in.Data)+1
	case "close":
		err = s.reg.CloseStdin(ctx, in.ID)
	}
	if err != nil {
		return StdinResult{}, err
	}
	info, err := s.reg.Get(ctx, in.ID)
	if err != nil {
		return StdinResult{}, err
	}
	return StdinResult{ID: info.ID, State: info.State, Action: in.Action, Bytes: n}, nil
}

// drainEvents returns the session's pending events, waiting up to
// in.Timeout for the first one when none is pending.
func (s *Server) drainEvents(ctx context.Context, se *session, in ProcessInput) (EventsResult, error) {
	limit := in.Limit
	if limit == 0 {
		limit = DefaultEventLimit
	}
	res := EventsResult{Events: []registry.Event{}}
	drained, cancel := context.WithCancel(ctx)
	cancel() // Next with a done context returns what is queued, never blocks.
	for len(res.Events) < limit {
		ev, err := se.events.Next(drained)
		if err != nil {
			break
		}
		res.Events = append(res.Events, ev)
	}
	if len(res.Events) == 0 && in.Timeout != nil && in.Timeout.D > 0 {
		wctx, cancel := context.WithTimeout(ctx, min(in.Timeout.D, MaxWaitTimeout))
		ev, err := se.events.Next(wctx)
		cancel()
		switch {
		case err == nil:
			res.Events = append(res.Events, ev)
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		default:
			return res, err
		}
	}
	for _, ev := range res.Events {
		res.Dropped += ev.Dropped
	}
	return res, nil
}

// toolHints is the MCP translation of the error classes: what a model
// can do next, added to the registry's message (which says what was
// wrong) in a tool error. "" adds nothing: the message says it all, or the
// class is a backend failure the model cannot act on. Every class is
// listed, so that a class added to errclass and forgotten here fails
// TestEveryClassHasAToolHint.
var toolHints = map[errclass.Class]string{
	errclass.InvalidID:   "use the id that terminal returned, or process action=list",
	errclass.Ambiguous:   "give the full id",
	errclass.NotFound:    "process action=list shows the ids that are tracked",
	errclass.NotRunning:  "the process has ended; poll or log still show its output",
	errclass.Limit:       "kill or wait for some processes first",
	errclass.Closed:      "the server is shutting down",
	errclass.Invalid:     "",
	errclass.InvalidSpec: "",
	errclass.Running:     "kill it first, or wait for it",
	errclass.StdinClosed: "",
	errclass.WaitTimeout: "",
	errclass.ProcessGone: "",
	errclass.Unsupported: "",
	errclass.SandboxGone: "",
	errclass.Released:    "",
	errclass.Exited:      "",
	errclass.Unavailable: "",
	errclass.NameInUse:   "pass replace=true to replace it, or choose another name",
}

// toolError turns a registry error into the message a model can act on:
// the registry's message (it says what was wrong) plus what to do next.
func toolError(action string, err error) error {
	msg := strings.ReplaceAll(err.Error(), "registry: ", "")
	if hint := toolHints[errclass.Of(err)]; hint != "" {
		return fmt.Errorf("%s: %s (%s)", action, msg, hint)
	}
	return fmt.Errorf("%s: %s", action, msg)
}
