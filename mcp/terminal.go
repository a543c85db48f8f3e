package mcp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/registry"
)

// DefaultForegroundTimeout applies to a foreground terminal call that sets
// neither timeout nor yield_after: a command that never ends (a server, a
// watcher, a prompt waiting for input) must not hang the agent's turn.
const DefaultForegroundTimeout = 5 * time.Minute

// TerminalInput are the arguments of the terminal tool.
type TerminalInput struct {
	Command          string            `json:"command" jsonschema:"Shell command line, run with /bin/sh -c (pipes, redirections, && work). Output is stdout and stderr merged."`
	Background       bool              `json:"background,omitempty" jsonschema:"Start the command and return its id at once instead of waiting. Use for servers, watchers and long jobs; then use the process tool (poll, log, wait, kill)."`
	Timeout          *Duration         `json:"timeout,omitempty" jsonschema:"Foreground only: kill the whole process tree after this long. Seconds (90) or a duration string (\"90s\", \"10m\"). Default 300 seconds unless yield_after is set; 0 means no limit."`
	IdleTimeout      *Duration         `json:"idle_timeout,omitempty" jsonschema:"Foreground only: kill the tree after this long without any output. Seconds or a duration string."`
	YieldAfter       *Duration         `json:"yield_after,omitempty" jsonschema:"Foreground only: if the command is still running after this long, return with its output so far and leave it running in the background (yielded=true; continue with the process tool). Seconds or a duration string."`
	Workdir          string            `json:"workdir,omitempty" jsonschema:"Working directory (default: the server's)."`
	PTY              bool              `json:"pty,omitempty" jsonschema:"Run on a pseudo-terminal (24x80), for programs that behave differently without one. Escape sequences are stripped from the output you get."`
	Stdin            bool              `json:"stdin,omitempty" jsonschema:"Keep stdin open so that process write, submit and close can feed the command (use with background=true). Without it the command reads no input."`
	WatchPatterns    []string          `json:"watch_patterns,omitempty" jsonschema:"Substrings to watch the output for (matched per line, escapes stripped); each match becomes an event (rate-limited: one per process per 10 seconds)."`
	NotifyOnComplete bool              `json:"notify_on_complete,omitempty" jsonschema:"Announce the exit of this background (or yielded) process as an event: a log notification and an entry of process action=events."`
	Env              map[string]string `json:"env,omitempty" jsonschema:"Extra environment variables for the command, NAME: value. PAGER=cat, GIT_PAGER=cat and PYTHONUNBUFFERED=1 are set unless you set them: no command waits on a pager, and Python output arrives live."`
	Persist          bool              `json:"persist,omitempty" jsonschema:"Background only: keep the process running after this MCP session ends (by default the session's processes are killed when it ends). A later session lists, polls and kills it by id; it carries the label mcp-persist."`
}

// workdir is the directory of a call that names dir.
func (s *Server) workdir(dir string) string {
	if s.cfg.Dir == "" || filepath.IsAbs(dir) {
		return dir
	}
	return filepath.Join(s.cfg.Dir, dir)
}

// agentEnv are the defaults of commands started for an agent: nobody is
// there to page through output, and a model wants Python's output as it
// comes. TerminalInput.Env overrides them.
var agentEnv = []string{"PAGER=cat", "GIT_PAGER=cat", "PYTHONUNBUFFERED=1"}

// TerminalResult is the terminal tool's structured result.
type TerminalResult struct {
	ID    string         `json:"id"`
	State registry.State `json:"state"`
	PID   int            `json:"pid,omitempty"`
	// Output is stripped and capped (see the package documentation).
	Output string `json:"output,omitempty"`
	// ExitCode is the command's exit code (128+N when signal N ended it);
	// absent while it runs.
	ExitCode *int `json:"exit_code,omitempty"`
	// Signal names the signal that ended the command, if one did.
	Signal string `json:"signal,omitempty"`
	// TimedOut is "", "timeout" or "idle_timeout".
	TimedOut     string `json:"timed_out,omitempty"`
	Truncated    bool   `json:"truncated,omitempty"`
	OmittedBytes int64  `json:"omitted_bytes,omitempty"`
	// OutputBytes is the total output so far; poll with this offset gets
	// what comes next.
	OutputBytes int64 `json:"output_bytes"`
	// Yielded: yield_after elapsed; the command keeps running.
	Yielded bool   `json:"yielded,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

func (s *Server) terminal(ctx context.Context, req *sdk.CallToolRequest, in TerminalInput) (*sdk.CallToolResult, *TerminalResult, error) {
	if strings.TrimSpace(in.Command) == "" {
		return nil, nil, errors.New(`"command" is empty: give the shell command line to run, e.g. "go test ./..."`)
	}
	for _, d := range []struct {
		name string
		v    *Duration
	}{{"timeout", in.Timeout}, {"idle_timeout", in.IdleTimeout}, {"yield_after", in.YieldAfter}} {
		if d.v != nil && d.v.D < 0 {
			return nil, nil, fmt.Errorf("%q is negative (%s): give seconds >= 0 or a duration string such as \"90s\"", d.name, d.v.D)
		}
		if in.Background && d.v != nil {
			return nil, nil, fmt.Errorf("%q applies to foreground runs only: with background=true, use process action=wait with a timeout, then action=kill", d.name)
		}
	}
	if in.Persist && !in.Background && in.YieldAfter == nil {
		return nil, nil, errors.New(`"persist" applies to background processes: set background=true (or yield_after)`)
	}
	se := s.session(req.Session)
	if se == nil {
		return nil, nil, errors.New("the server is shutting down, or lost its registry")
	}
	opts := registry.StartOptions{
		Backend: s.cfg.Backend,
		Command: in.Command,
		Dir:     s.workdir(in.Workdir),
		Stdin:   in.Stdin,
		Watch:   slices.Clone(in.WatchPatterns),
		Notify:  in.NotifyOnComplete,
		Labels:  map[string]string{"via": "mcp", SessionLabel: se.id},
		Env:     append(slices.Clone(s.cfg.Env), agentEnv...),
	}
	if in.Persist {
		opts.Labels[PersistLabel] = "1"
	}
	for _, k := range slices.Sorted(maps.Keys(in.Env)) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, nil, fmt.Errorf("env name %q is not valid: names are non-empty and contain no '='", k)
		}
		opts.Env = append(opts.Env, k+"="+in.Env[k])
	}
	if in.PTY {
		opts.PTY = &env.WindowSize{Rows: 24, Cols: 80}
	}

	if in.Background {
		info, err := s.reg.Start(ctx, opts)
		if err != nil {
			return nil, nil, toolError("start", err)
		}
		res := &TerminalResult{ID: info.ID, State: info.State, PID: info.PID, OutputBytes: info.OutputBytes}
		text := fmt.Sprintf("started %s in the background (pid %d). Use the process tool with this id: poll or log for output, wait for the exit, kill to stop it.", info.ID, info.PID)
		return textResult(text), res, nil
	}

	run := registry.RunOptions{StartOptions: opts}
	if in.Timeout != nil {
		run.Timeout = in.Timeout.D
	} else if in.YieldAfter == nil {
		run.Timeout = DefaultForegroundTimeout
	}
	if in.IdleTimeout != nil {
		run.IdleTimeout = in.IdleTimeout.D
	}
	if in.YieldAfter != nil {
		run.YieldAfter = in.YieldAfter.D
	} else {
		// Nobody can be told about the end of a run whose result they are
		// waiting for; see notificationLevel.
		run.Notify = false
	}
	rr, err := s.reg.Run(ctx, run)
	if err != nil && rr.ID == "" {
		return nil, nil, toolError("run", err)
	}
	out := render(rr.Output, rr.OmittedAt, rr.OmittedBytes, s.cfg.MaxOutput)
	res := &TerminalResult{
		ID:           rr.ID,
		State:        rr.State,
		PID:          rr.PID,
		Output:       out.Text,
		TimedOut:     rr.TimedOut,
		Truncated:    out.Omitted > 0,
		OmittedBytes: out.Omitted,
		OutputBytes:  rr.OutputBytes,
		Yielded:      rr.Yielded,
		Reason:       rr.Reason,
	}
	if rr.Status != nil {
		code := rr.Status.ShellCode()
		res.ExitCode = &code
		res.Signal = string(rr.Status.Signal)
	}
	if se != nil && rr.Yielded {
		se.setCursor(rr.ID, rr.OutputBytes)
	}
	result := textResult(out.Text + terminalFooter(res))
	if err != nil {
		// The process was registered but the run did not complete
		// normally (it could not start, the kill failed, the call was
		// cancelled): report both what happened and the error.
		result = textResult(out.Text + terminalFooter(res) + "\nerror: " + err.Error())
		result.IsError = true
	}
	return result, res, nil
}

// terminalFooter is the one-line summary a model reads after the output.
func terminalFooter(r *TerminalResult) string {
	var b strings.Builder
	if r.Output != "" && !strings.HasSuffix(r.Output, "\n") {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "[%s %s", r.ID, r.State)
	if r.ExitCode != nil {
		fmt.Fprintf(&b, ", exit code %d", *r.ExitCode)
	}
	if r.Signal != "" {
		fmt.Fprintf(&b, ", signal %s", r.Signal)
	}
	switch r.TimedOut {
	case registry.TimedOutTimeout:
		b.WriteString(", killed by the timeout")
	case registry.TimedOutIdle:
		b.WriteString(", killed by the idle timeout (no output)")
	}
	if r.Yielded {
		b.WriteString(", still running in the background: continue with the process tool")
	}
	if r.Reason != "" {
		fmt.Fprintf(&b, ": %s", r.Reason)
	}
	b.WriteString("]")
	return b.String()
}

func textResult(text string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}
}
