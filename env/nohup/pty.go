package nohup

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/corralhq/corral/env"
)

// Terminals (Spec.PTY). The sandbox gives a command a terminal with
// util-linux script, or else python3 running sh/pty.py, found once per Env
// by corral_ptyprobe (sh/pty.sh): the wrapped command is sh/ptycmd.sh,
// which execs script (python3), which runs sh/ptyterm.sh as the leader of
// the terminal's session, which sets the window size, records the
// terminal's path and execs Shell -c Command.
// Everything else is the wrapped process of any command: script is the
// recorded command (its PID, start time, process group and wait status),
// its stdin the FIFO, its stdout the log; the CORRAL_TREE scan reaches
// what runs on the terminal. What follows from it:
//
//   - the exit code is the command's (script -e); a command killed by
//     signal N while script lives is reported as exit code 128+N, since
//     script only passes that on; a signal that ends script itself (KILL,
//     HUP, ...) is reported as that signal. Script catches TERM, INT and
//     QUIT and answers them with SIGTERM to the terminal's session leader,
//     the command's shell (which the tree signal reaches directly anyway).
//     pty.py ends as the command did, killed by the same signal too, and
//     is itself ended by any signal the tree gets.
//   - without Spec.Stdin the terminal's input is a FIFO nobody writes to,
//     so a command reading its terminal waits, as on env/local; Write
//     refuses. CloseStdin ends the FIFO's writer: script then types the
//     terminal's EOF character.
//   - Resize sets the size on the terminal's path (stty rows R cols C),
//     and the kernel sends SIGWINCH to its foreground process group.
//   - a sandbox with neither (busybox only) cannot: Start with a PTY fails
//     with an error matching env.ErrUnsupported that says what is missing,
//     and from then on Capabilities says PTY false.

// ptyState is what the probe found, once it has run.
type ptyState struct {
	turn   chan struct{} // one probe at a time
	mu     sync.Mutex
	probed bool
	kind   string // "script" (util-linux) or "python3"; empty: none
	tool   string // its path
	why    string // why there is none
}

// missing reports whether the probe ran and found nothing.
func (s *ptyState) missing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.probed && s.kind == ""
}

// ptyTool is what gives a command a terminal in a sandbox.
type ptyTool struct{ kind, path string }

// ptyTool returns what gives a command a terminal in the sandbox, asking
// the sandbox the first time (a failed round trip is not remembered), or
// an error matching env.ErrUnsupported that says what is missing.
func (e *Env) ptyTool(ctx context.Context) (ptyTool, error) {
	s := &e.pty
	result := func() (tool ptyTool, ok bool, err error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.probed {
			return ptyTool{}, false, nil
		}
		if s.kind == "" {
			return ptyTool{}, true, fmt.Errorf("nohup %s: PTY: the sandbox has neither util-linux script nor python3 to give a command a terminal (%s): %w",
				e.opts.Name, s.why, env.ErrUnsupported)
		}
		return ptyTool{s.kind, s.tool}, true, nil
	}
	if tool, ok, err := result(); ok {
		return tool, err
	}
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return ptyTool{}, fmt.Errorf("nohup %s: probe for a terminal: %w", e.opts.Name, ctx.Err())
	}
	defer func() { <-s.turn }()
	if tool, ok, err := result(); ok {
		return tool, err
	}
	out, err := e.call(ctx, "probe for a terminal", call("corral_ptyprobe"), true)
	if err != nil {
		return ptyTool{}, err
	}
	var tool, why string
	kind, rest, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	switch {
	case (kind == "script" || kind == "python3") && validSafePath(rest):
		tool = rest
	case kind == "script" || kind == "python3":
		why = fmt.Sprintf("%s is at %q, a path the engine does not pass on", kind, rest)
		kind = ""
	case kind == wordNone:
		why, kind = rest, ""
	default:
		return ptyTool{}, fmt.Errorf("nohup %s: probe for a terminal: unexpected reply %q", e.opts.Name, trunc(out))
	}
	s.mu.Lock()
	s.probed, s.kind, s.tool, s.why = true, kind, tool, why
	s.mu.Unlock()
	t, _, err := result()
	return t, err
}

// ptyEnviron returns the KEY=VALUE words that ptycmd.sh and ptyterm.sh
// read, after the Spec's own (later entries win, and ptyterm.sh removes
// them before the command runs). dir is the process's state directory.
func (e *Env) ptyEnviron(spec env.Spec, tool ptyTool, dir string) []string {
	environ := append(append([]string(nil), spec.Env...),
		"CORRAL_PTY_KIND="+tool.kind,
		"CORRAL_PTY_TOOL="+tool.path,
		"CORRAL_PTY_SH="+e.opts.Shell,
		"CORRAL_PTY_TERM="+ptyTermBody,
		"CORRAL_PTY_CMD="+spec.Command,
		"CORRAL_PTY_ROWS="+strconv.Itoa(int(spec.PTY.Rows)),
		"CORRAL_PTY_COLS="+strconv.Itoa(int(spec.PTY.Cols)),
		"CORRAL_PTY_DIR="+dir,
	)
	if tool.kind == "python3" {
		environ = append(environ, "CORRAL_PTY_PY="+ptyPy)
	}
	return environ
}

var (
	ptyCmdBody  = stripComments(ptyCmdSh)
	ptyTermBody = stripComments(ptyTermSh)
)

// Resize implements env.Process: it sets the window size of the process's
// terminal (the process then gets SIGWINCH). ErrUnsupported without a
// PTY, ErrExited once the process has ended.
func (p *process) Resize(ctx context.Context, size env.WindowSize) error {
	if err := p.check(); err != nil {
		return err
	}
	if !p.ref.PTY {
		return fmt.Errorf("%s: resize: no PTY: %w", p.name(), env.ErrUnsupported)
	}
	if size.Rows == 0 || size.Cols == 0 {
		return fmt.Errorf("%s: resize: %w", p.name(), &env.SpecError{Field: "PTY", Value: fmt.Sprintf("%dx%d", size.Rows, size.Cols), Reason: "rows and columns must both be at least 1"})
	}
	r := p.ref
	out, err := p.e.call(ctx, "resize", call("corral_resize", r.Dir, itoa(int(r.PID)), itoa(int(r.Start)),
		strconv.Itoa(int(size.Rows)), strconv.Itoa(int(size.Cols))), false)
	if err != nil {
		return err
	}
	switch reply := strings.TrimSpace(string(out)); {
	case reply == "ok":
		return nil
	case reply == "exited":
		return fmt.Errorf("%s: resize: %w", p.name(), env.ErrExited)
	case strings.HasPrefix(reply, "failed "):
		return fmt.Errorf("%s: resize: %s", p.name(), strings.TrimPrefix(reply, "failed "))
	}
	return fmt.Errorf("%s: resize: unexpected reply %q", p.name(), trunc(out))
}
