package mcp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"regexp"
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
	IdleTimeout      *Duration         `json:"idle_timeout,omitempty" jsonschema:"Kill the tree after this long without any output (foreground or background). Seconds or a duration string."`
	YieldAfter       *Duration         `json:"yield_after,omitempty" jsonschema:"Foreground only: if the command is still running after this long, return with its output so far and leave it running in the background (yielded=true; continue with the process tool). Seconds or a duration string."`
	Workdir          string            `json:"workdir,omitempty" jsonschema:"Working directory (default: the server's)."`
	PTY              bool              `json:"pty,omitempty" jsonschema:"Run on a pseudo-terminal (24x80), for programs that behave differently without one; process write and submit type on it. Escape sequences are stripped from the output you get."`
	Stdin            bool              `json:"stdin,omitempty" jsonschema:"Keep stdin open so that process write, submit and close can feed the command (use with background=true). Without it the command reads no input."`
	WatchPatterns    []string          `json:"watch_patterns,omitempty" jsonschema:"Substrings to watch the output for (matched per line, escapes stripped); each match becomes an event (rate-limited: one per process per 10 seconds)."`
	NotifyOnComplete bool              `json:"notify_on_complete,omitempty" jsonschema:"Announce the exit of this background (or yielded) process as an event: a log notification and an entry of process action=events."`
	Env              map[string]string `json:"env,omitempty" jsonschema:"Extra environment variables for the command, NAME: value. Pagers and the prompts a tool can skip are switched off unless you set these (PAGER=cat, GIT_PAGER=cat, GH_PAGER=cat, GIT_TERMINAL_PROMPT=0, GH_PROMPT_DISABLED=1, PIP_NO_INPUT=1, DEBIAN_FRONTEND=noninteractive, npm_config_yes=false and more; see corral's docs/mcp.md), and PYTHONUNBUFFERED=1 makes Python output arrive live."`
	Persist          bool              `json:"persist,omitempty" jsonschema:"Background only: keep the process running after this MCP session ends (by default the session's processes are killed when it ends). A later session lists, polls and kills it by id; it carries the label mcp-persist."`
	Name             string            `json:"name,omitempty" jsonschema:"Background only: name the process (letters, digits, . _ -, starting with a letter); the name works wherever an id does. If a process of that name still runs the same command in the same workdir, it is reused (reused=true) instead of starting a second one; with another command the start is refused, unless replace=true."`
	Replace          bool              `json:"replace,omitempty" jsonschema:"With name: kill the process tree holding the name first, then start this command."`
	ReadyPort        int               `json:"ready_port,omitempty" jsonschema:"Background only: the process is ready once a process of its tree listens on this TCP port (another program on the port does not count). Then wait with process action=wait ready=true."`
	ReadyPattern     string            `json:"ready_pattern,omitempty" jsonschema:"Background only: the process is ready once an output line matches this regular expression (Go syntax), e.g. \"listening on\"."`
	ReadyURL         string            `json:"ready_url,omitempty" jsonschema:"Background only: the process is ready once a GET of this http(s) URL, made where the command runs, answers 2xx or 3xx, e.g. http://127.0.0.1:3000/health."`
	TTL              *Duration         `json:"ttl,omitempty" jsonschema:"Background only: kill the tree this long after it started (a ttl_expired event says so). Seconds or a duration string such as \"2h\"."`
	Memory           string            `json:"memory,omitempty" jsonschema:"Hard memory limit of the whole process tree, e.g. \"512M\" or \"2G\" (powers of 1024, at least 6M). Going over it is an OOM kill of the tree (exit code 137, reason \"out of memory (limit 2G)\"). A backend that cannot enforce a limit refuses the command."`
	CPUs             *float64          `json:"cpus,omitempty" jsonschema:"Hard CPU limit of the whole tree in cores, e.g. 1.5 (0.01 to 1024): it is throttled to that."`
	Pids             *int64            `json:"pids,omitempty" jsonschema:"Hard limit on the tasks (processes and threads) of the tree at once, e.g. 512 (at least 10): a fork beyond it fails."`
	RunawayCPU       *float64          `json:"runaway_cpu,omitempty" jsonschema:"A runaway event (level warning) when the tree uses at least this percent of a core (100 is one core, 200 two) for runaway_for with no output. Nothing is killed."`
	RunawayMemory    string            `json:"runaway_memory,omitempty" jsonschema:"A runaway event (level warning) when the tree's memory grows by at least this size, e.g. \"512M\" or \"4G\", within runaway_for. Nothing is killed."`
	RunawayFor       *Duration         `json:"runaway_for,omitempty" jsonschema:"The window of runaway_cpu and runaway_memory: seconds or a duration string; default 2m."`
}

// workdir is the directory of a call that names dir.
func (s *Server) workdir(dir string) string {
	if s.cfg.Dir == "" || filepath.IsAbs(dir) {
		return dir
	}
	return filepath.Join(s.cfg.Dir, dir)
}

// TerminalResult is the terminal tool's structured result.
type TerminalResult struct {
	ID string `json:"id"`
	// Name is the process's name, if it has one.
	Name  string         `json:"name,omitempty"`
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
	// Yielded: yield_after elapsed, or the command waits for input
	// (WaitingInput); it keeps running.
	Yielded bool `json:"yielded,omitempty"`
	// WaitingInput: the command waits for input (a pty or stdin run
	// returns as soon as it does): how, and the prompt it printed. Answer
	// with process submit (or write).
	WaitingInput *registry.WaitingInput `json:"waiting_input,omitempty"`
	// Reused: a process of that name was already running the same
	// command; ID names it and nothing new was started.
	Reused bool `json:"reused,omitempty"`
	// Limits are the process's limits in the arguments' words ("memory
	// 2G, cpus 1.5, pids 512"); absent when it has none.
	Limits string `json:"limits,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// limitsArgs reads the memory, cpus and pids arguments: nil when none is
// given, an error naming the argument when one is not a limit.
func limitsArgs(in TerminalInput) (*env.Limits, error) {
	var l env.Limits
	if in.Memory != "" {
		n, err := env.ParseSize(in.Memory)
		if err != nil {
			return nil, fmt.Errorf(`"memory" %q is not a size: give bytes or a size such as "512M" or "2G"`, clipArg(in.Memory))
		}
		l.Memory = n
	}
	if in.CPUs != nil {
		if *in.CPUs <= 0 {
			return nil, fmt.Errorf(`"cpus" %v: give a number of cores above 0, such as 1.5`, *in.CPUs)
		}
		l.CPUs = *in.CPUs
	}
	if in.Pids != nil {
		if *in.Pids <= 0 {
			return nil, fmt.Errorf(`"pids" %d: give a number of tasks above 0, such as 512`, *in.Pids)
		}
		l.Pids = *in.Pids
	}
	// One limit at a time, so that the error names its argument.
	for _, c := range []struct {
		name, given string
		l           env.Limits
	}{
		{env.LimitMemory, quoteArg(in.Memory), env.Limits{Memory: l.Memory}},
		{env.LimitCPUs, fmt.Sprint(l.CPUs), env.Limits{CPUs: l.CPUs}},
		{env.LimitPids, fmt.Sprint(l.Pids), env.Limits{Pids: l.Pids}},
	} {
		if err := c.l.Validate(); err != nil {
			var se *env.SpecError
			if errors.As(err, &se) {
				return nil, fmt.Errorf("%q %s %s", c.name, c.given, se.Reason)
			}
			return nil, fmt.Errorf("%q: %w", c.name, err)
		}
	}
	if l.IsZero() {
		return nil, nil
	}
	return &l, nil
}

// runawayArgs reads the runaway_* arguments: nil when none is given, an
// error naming the argument when one is out of bounds.
func runawayArgs(in TerminalInput) (*registry.RunawayOptions, error) {
	var o registry.RunawayOptions
	if in.RunawayCPU != nil {
		if !(*in.RunawayCPU > 0) || math.IsInf(*in.RunawayCPU, 0) {
			return nil, fmt.Errorf(`"runaway_cpu" %v: give a percent of a core above 0, such as 90`, *in.RunawayCPU)
		}
		o.CPUPercent = *in.RunawayCPU
	}
	if in.RunawayMemory != "" {
		n, err := env.ParseSize(in.RunawayMemory)
		if err != nil {
			return nil, fmt.Errorf(`"runaway_memory" %s is not a size: give bytes or a size such as "512M" or "4G"`, quoteArg(in.RunawayMemory))
		}
		o.Memory = n
	}
	if in.RunawayFor != nil {
		if o.IsZero() {
			return nil, errors.New(`"runaway_for" is the window of runaway_cpu or runaway_memory: give one of them too`)
		}
		o.For = registry.Duration(in.RunawayFor.D)
		if err := o.Validate(); err != nil {
			return nil, fmt.Errorf(`"runaway_for" %s: give at least 1s`, in.RunawayFor.D)
		}
	}
	if o.IsZero() {
		return nil, nil
	}
	return &o, nil
}

// quoteArg is s quoted as the model gave it, clipped.
func quoteArg(s string) string { return fmt.Sprintf("%q", clipArg(s)) }

// clipArg cuts a long argument for an error: a huge value is never
// echoed whole.
func clipArg(s string) string {
	if len(s) > 40 {
		return strings.ToValidUTF8(s[:40], "") + "…"
	}
	return s
}

// limitsText is in's limits as Limits.String says them, "" for none.
func limitsText(l *env.Limits) string {
	if l == nil {
		return ""
	}
	return l.String()
}

// checkDevServer checks the arguments for dev servers (name, readiness,
// ttl), which apply to background processes only, and returns the
// readiness conditions (nil for none).
func checkDevServer(in TerminalInput) (*registry.ReadyOptions, error) {
	if !in.Background {
		for _, a := range []struct {
			name string
			set  bool
		}{{"name", in.Name != ""}, {"replace", in.Replace}, {"ready_port", in.ReadyPort != 0}, {"ready_pattern", in.ReadyPattern != ""},
			{"ready_url", in.ReadyURL != ""}, {"ttl", in.TTL != nil}} {
			if a.set {
				return nil, fmt.Errorf("%q applies to background processes: set background=true (foreground runs have timeout)", a.name)
			}
		}
		return nil, nil
	}
	if in.Replace && in.Name == "" {
		return nil, errors.New(`"replace" needs "name": it replaces the process holding that name`)
	}
	if in.ReadyPort != 0 {
		if err := env.ValidatePort(in.ReadyPort); err != nil {
			return nil, fmt.Errorf(`"ready_port" %d is not a TCP port: give a number from 1 to 65535`, in.ReadyPort)
		}
	}
	if in.ReadyPattern != "" {
		if _, err := regexp.Compile(in.ReadyPattern); err != nil {
			return nil, fmt.Errorf(`"ready_pattern" is not a valid regular expression: %v`, err)
		}
	}
	if in.ReadyURL != "" {
		if err := env.ValidateCheckURL(in.ReadyURL); err != nil {
			var se *env.SpecError
			if errors.As(err, &se) {
				return nil, fmt.Errorf(`"ready_url" %q %s`, in.ReadyURL, se.Reason)
			}
			return nil, fmt.Errorf(`"ready_url": %w`, err)
		}
	}
	if in.ReadyPort == 0 && in.ReadyPattern == "" && in.ReadyURL == "" {
		return nil, nil
	}
	return &registry.ReadyOptions{Port: in.ReadyPort, Pattern: in.ReadyPattern, URL: in.ReadyURL}, nil
}

// startedText is the text result of a background start: what happened and
// what to do next.
func startedText(info registry.Info, session string, persist bool) string {
	var b strings.Builder
	who := info.ID
	if info.Name != "" {
		who = fmt.Sprintf("%s (%s)", info.ID, info.Name)
	}
	if info.Reused {
		fmt.Fprintf(&b, "reused %s: already running with the same command (pid %d); nothing new was started.", who, info.PID)
		if info.Labels[SessionLabel] != session && info.Labels[PersistLabel] == "" {
			// It lives as long as the session that started it, not
			// this one.
			b.WriteString(" It was started by another MCP session without persist and ends with that session; to keep it, start it again with replace=true and persist=true.")
		} else if persist && info.Labels[PersistLabel] == "" {
			b.WriteString(" It was started without persist and ends with this session; to keep it, start it again with replace=true and persist=true.")
		}
	} else {
		fmt.Fprintf(&b, "started %s in the background (pid %d).", who, info.PID)
	}
	b.WriteString(" Use the process tool with this id")
	if info.Name != "" {
		b.WriteString(" or name")
	}
	b.WriteString(": ")
	if info.Ready != nil {
		if info.ReadyAt.IsZero() {
			b.WriteString("wait with ready=true until it is ready, ")
		} else {
			b.WriteString("it is ready; ")
		}
	}
	b.WriteString("poll or log for output, wait for the exit, kill to stop it.")
	return b.String()
}

func (s *Server) terminal(ctx context.Context, req *sdk.CallToolRequest, in TerminalInput) (*sdk.CallToolResult, *TerminalResult, error) {
	if strings.TrimSpace(in.Command) == "" {
		return nil, nil, errors.New(`"command" is empty: give the shell command line to run, e.g. "go test ./..."`)
	}
	for _, d := range []struct {
		name string
		v    *Duration
	}{{"timeout", in.Timeout}, {"idle_timeout", in.IdleTimeout}, {"yield_after", in.YieldAfter}, {"ttl", in.TTL}} {
		if d.v != nil && d.v.D < 0 {
			return nil, nil, fmt.Errorf("%q is negative (%s): give seconds >= 0 or a duration string such as \"90s\"", d.name, d.v.D)
		}
		if in.Background && d.v != nil && (d.name == "timeout" || d.name == "yield_after") {
			return nil, nil, fmt.Errorf("%q applies to foreground runs only: with background=true, use ttl (kill after that long), or process action=wait with a timeout, then action=kill", d.name)
		}
	}
	if in.Persist && !in.Background && in.YieldAfter == nil {
		return nil, nil, errors.New(`"persist" applies to background processes: set background=true (or yield_after)`)
	}
	ready, err := checkDevServer(in)
	if err != nil {
		return nil, nil, err
	}
	limits, err := limitsArgs(in)
	if err != nil {
		return nil, nil, err
	}
	runaway, err := runawayArgs(in)
	if err != nil {
		return nil, nil, err
	}
	se := s.session(req.Session)
	if se == nil {
		return nil, nil, errors.New("the server is shutting down, or lost its registry")
	}
	opts := registry.StartOptions{
		Backend: s.cfg.Backend,
		Command: in.Command,
		Dir:     s.workdir(in.Workdir),
		// A terminal nobody can type on leaves a prompt unanswerable.
		Stdin:   in.Stdin || in.PTY,
		Watch:   slices.Clone(in.WatchPatterns),
		Notify:  in.NotifyOnComplete,
		Labels:  map[string]string{"via": "mcp", SessionLabel: se.id},
		Environ: s.cfg.Environ,
		Env:     slices.Clone(registry.AgentEnv), // TerminalInput.Env overrides them
		Limits:  limits,
		Runaway: runaway,
	}
	if in.Persist {
		opts.Labels[PersistLabel] = "1"
	} else {
		opts.Session = se.id
	}
	opts.Name, opts.Replace, opts.Ready = in.Name, in.Replace, ready
	if in.TTL != nil {
		opts.TTL = in.TTL.D
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
		if in.IdleTimeout != nil {
			opts.IdleTimeout = in.IdleTimeout.D
		}
		info, err := s.reg.Start(ctx, opts)
		if err != nil {
			return nil, nil, toolError("start", err)
		}
		res := &TerminalResult{ID: info.ID, Name: info.Name, State: info.State, PID: info.PID, OutputBytes: info.OutputBytes, Reused: info.Reused,
			Limits: limitsText(info.Limits)}
		return textResult(startedText(info, se.id, in.Persist)), res, nil
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
	// A command that can read input (pty, stdin) and asks for it returns
	// at once, running, so that the agent answers instead of waiting for
	// the timeout.
	run.YieldOnInput = in.PTY || in.Stdin
	if in.YieldAfter != nil {
		run.YieldAfter = in.YieldAfter.D
	} else if !run.YieldOnInput {
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
		WaitingInput: rr.WaitingInput,
		Limits:       limitsText(rr.Limits),
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
	case registry.TimedOutTTL:
		b.WriteString(", killed when its ttl ran out")
	}
	switch {
	case r.Yielded && r.WaitingInput != nil:
		fmt.Fprintf(&b, ", waiting for input (%s)", r.WaitingInput.Kind)
		if r.WaitingInput.Prompt != "" {
			fmt.Fprintf(&b, " at %q", r.WaitingInput.Prompt)
		}
		b.WriteString(": answer with the process tool (action submit), or kill it")
	case r.Yielded:
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
