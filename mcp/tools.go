package mcp

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

const terminalDescription = `Run a shell command (via /bin/sh -c) and supervise its whole process tree.

Foreground (default): waits for the command and returns its output (stdout and stderr merged, terminal escapes
stripped, at most 50,000 bytes: head and tail kept with a "[... N bytes omitted ...]" line) and exit code.
A foreground run is killed (the whole tree: children, grandchildren, setsid escapees) after timeout (default
300 s) or idle_timeout; timed_out then says which fired. With yield_after, a command still running after that
long keeps running in the background and the result has yielded=true.

Background (background=true): returns the process id at once; use the process tool to poll its output, wait
for it, write to its stdin (start it with stdin=true), or kill it. notify_on_complete announces its exit as an
event; watch_patterns announce matching output lines.

Limits (memory, cpus, pids) are hard ceilings on the whole tree: memory over the limit is an OOM kill
(exit code 137, reason "out of memory (limit 2G)"). A backend that cannot enforce one refuses the command.`

const processDescription = `Manage processes started by terminal, by id.

Actions: list (every tracked process), poll (state + output since your last poll; offset to re-read),
log (output lines: offset = first line, limit = count; default the last 200 lines), wait (until it ends or
timeout, default 60 s; returns state, exit status and new output; wait_timed_out=true if still running),
kill (signal the whole tree, default TERM, SIGKILL after grace, verified), write (data to stdin as is),
submit (data + Enter), close (close stdin: EOF), events (pending events: exits of notify_on_complete
processes, watch matches; timeout waits for the first one).

Final states: exited, killed, timed_out, lost, failed; status.code is the exit code, status.signal the
signal that ended it. Output is stripped of terminal escapes and capped like terminal's.

A backend that does not answer (a paused container, an SSH host that is down) never blocks a call: list
shows backend_condition (paused, unreachable, gone) and ports_unknown; kill returns unreachable=true (not
killed) and keeps the kill pending (kill_pending): it runs when the backend answers, and a kill_finished
event reports the outcome.`

// durationSchema describes Duration: a number of seconds or a string.
var durationSchema = &jsonschema.Schema{
	Types:       []string{"number", "string"},
	Description: `Seconds (a number, e.g. 90) or a duration string such as "90s", "10m", "1h30m".`,
}

func (s *Server) addTools() error {
	opts := &jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[Duration](): durationSchema,
	}}
	termSchema, err := jsonschema.For[TerminalInput](opts)
	if err != nil {
		return fmt.Errorf("mcp: terminal input schema: %w", err)
	}
	procSchema, err := jsonschema.For[ProcessInput](opts)
	if err != nil {
		return fmt.Errorf("mcp: process input schema: %w", err)
	}
	actions := make([]any, len(processActions))
	for i, a := range processActions {
		actions[i] = a
	}
	procSchema.Properties["action"].Enum = actions
	procSchema.Properties["limit"].Minimum = new(float64)

	sdk.AddTool(s.mcp, &sdk.Tool{
		Name:        "terminal",
		Title:       "Run a shell command",
		Description: terminalDescription,
		InputSchema: termSchema,
		Annotations: &sdk.ToolAnnotations{DestructiveHint: new(true), OpenWorldHint: new(true)},
	}, capErrors(s.cfg.MaxOutput, s.terminal))
	sdk.AddTool(s.mcp, &sdk.Tool{
		Name:        "process",
		Title:       "Manage background processes",
		Description: processDescription,
		InputSchema: procSchema,
		Annotations: &sdk.ToolAnnotations{DestructiveHint: new(true)},
	}, capErrors(s.cfg.MaxOutput, s.process))
	return nil
}

// capErrors applies the output cap (Config.MaxOutput, --max-output) to a
// tool's errors as well: an error reaches the model's context as output
// does, and must never carry a large input back whole (a long command, a
// huge value). The head and the tail are kept, as for output.
func capErrors[In, Out any](limit int, h sdk.ToolHandlerFor[In, Out]) sdk.ToolHandlerFor[In, Out] {
	return func(ctx context.Context, req *sdk.CallToolRequest, in In) (*sdk.CallToolResult, Out, error) {
		res, out, err := h(ctx, req, in)
		if err != nil && len(err.Error()) > limit {
			err = errors.New(render([]byte(err.Error()), 0, 0, limit).Text)
		}
		return res, out, err
	}
}
