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
// util-linux script, found once per Env by corral_ptyprobe (sh/pty.sh):
// the wrapped command is sh/ptycmd.sh, which execs script, which runs
// sh/ptyterm.sh as the leader of the terminal's session, which sets the
// window size, records the terminal's path and execs Shell -c Command.
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
//   - without Spec.Stdin the terminal's input is a FIFO nobody writes to,
//     so a command reading its terminal waits, as on env/local; Write
//     refuses. CloseStdin ends the FIFO's writer: script then types the
//     terminal's EOF character.
//   - Resize sets the size on the terminal's path (stty rows R cols C),
//     and the kernel sends SIGWINCH to its foreground process group.
//   - a sandbox without util-linux script (busybox only) cannot: Start
//     with a PTY fails with an error matching env.ErrUnsupported, and from
//     then on Capabilities says PTY false.

// ptyState is what the probe found, once it has run.
type ptyState struct {
	turn   chan struct{} // one probe at a time
	mu     sync.Mutex
	probed bool
	tool   string // the path of util-linux script; empty: none
	why    string // why there is none
}

// missing reports whether the probe ran and found nothing.
func (s *ptyState) missing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.probed && s.tool == ""
}

// ptyTool returns the path of util-linux script in the sandbox, asking the
// sandbox the first time (a failed round trip is not remembered), or an
// error matching env.ErrUnsupported that says what is missing.
func (e *Env) ptyTool(ctx context.Context) (string, error) {
	s := &e.pty
	result := func() (tool string, ok bool, err error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.probed {
			return "", false, nil
		}
		if s.tool == "" {
			return "", true, fmt.Errorf("nohup %s: PTY: the sandbox has no util-linux script (%s), which gives a command a terminal here: %w",
				e.opts.Name, s.why, env.ErrUnsupported)
		}
		return s.tool, true, nil
	}
	if tool, ok, err := result(); ok {
		return tool, err
	}
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return "", fmt.Errorf("nohup %s: probe for a terminal: %w", e.opts.Name, ctx.Err())
	}
	defer func() { <-s.turn }()
	if tool, ok, err := result(); ok {
		return tool, err
	}
	out, err := e.call(ctx, "probe for a terminal", call("corral_ptyprobe"), true)
	if err != nil {
		return "", err
	}
	var tool, why string
	kind, rest, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	switch {
	case kind == "script" && validSafePath(rest):
		tool = rest
	case kind == "script":
		why = fmt.Sprintf("util-linux script is at %q, a path the engine does not pass on", rest)
	case kind == "none":
		why = rest
	default:
		return "", fmt.Errorf("nohup %s: probe for a terminal: unexpected reply %q", e.opts.Name, trunc(out))
	}
	s.mu.Lock()
	s.probed, s.tool, s.why = true, tool, why
	s.mu.Unlock()
	tool, _, err = result()
	return tool, err
}

// ptyEnviron returns the KEY=VALUE words that ptycmd.sh and ptyterm.sh
// read, after the Spec's own (later entries win, and ptyterm.sh removes
// them before the command runs). dir is the process's state directory.
func (e *Env) ptyEnviron(spec env.Spec, tool, dir string) []string {
	return append(append([]string(nil), spec.Env...),
		"CORRAL_PTY_TOOL="+tool,
		"CORRAL_PTY_SH="+e.opts.Shell,
		"CORRAL_PTY_TERM="+ptyTermBody,
		"CORRAL_PTY_CMD="+spec.Command,
		"CORRAL_PTY_ROWS="+strconv.Itoa(int(spec.PTY.Rows)),
		"CORRAL_PTY_COLS="+strconv.Itoa(int(spec.PTY.Cols)),
		"CORRAL_PTY_DIR="+dir,
	)
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
