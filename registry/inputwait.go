package registry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/env"
)

// Input waits: a running process whose foreground job is blocked reading
// its terminal or its stdin pipe, after a quiet spell, is marked
// waiting_input (Info.WaitingInput) with what it asked, and a
// waiting_input event says so once per wait, so that an agent answers
// instead of sitting until a timeout.
//
// One watcher per opened backend whose environment can tell
// (env.InputWatcher) wakes every inputTick and makes one batched
// InputWaits call, bounded by inputTimeout, for the processes of that
// backend that could wait for input (a PTY, or stdin kept open) and have
// been quiet (no output, no input) for Config.InputQuiet, and for those
// already marked, to see them read. Nothing else is asked: a process with
// its stdin closed reads EOF and never waits, and a busy one is not
// looked at. The mark clears when the process writes output, when input
// is written to it, or when a look finds it no longer waiting.

const (
	// DefaultInputQuiet is Config.InputQuiet when it is zero.
	DefaultInputQuiet = 1500 * time.Millisecond
	// inputTick is the watcher's round.
	inputTick = 500 * time.Millisecond
	// inputTimeout bounds one round's InputWaits call.
	inputTimeout = 2 * time.Second
	// maxPrompt bounds WaitingInput.Prompt.
	maxPrompt = 200
)

// WaitingInput says that a running process waits for input.
type WaitingInput struct {
	// Kind is how it reads: env.InputLine, InputRaw, InputPassword or
	// InputPipe.
	Kind string `json:"kind"`
	// Since is when the look that found it waiting was made.
	Since time.Time `json:"since"`
	// Prompt is the last line of its output, ANSI-stripped, at most 200
	// bytes: what it asked ("Password: ", "Ok to proceed? (y) ").
	Prompt string `json:"prompt,omitempty"`
}

// inputState is what the watcher knows of one process; its own lock
// guards it (infoLocked reads it under proc.mu).
type inputState struct {
	mu      sync.Mutex
	waiting *WaitingInput
	// lastInput is when input was last written (unix nanos): the quiet
	// spell counts from it too.
	lastInput time.Time
}

// current returns a copy of the mark, nil when there is none.
func (s *inputState) current() *WaitingInput {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiting == nil {
		return nil
	}
	w := *s.waiting
	return &w
}

// clear drops the mark; input, when true, records that input was just
// written.
func (s *inputState) clear(input bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting = nil
	if input {
		s.lastInput = time.Now()
	}
}

// set marks the process waiting, and reports whether that is news (it
// was not marked, or waits in another way).
func (s *inputState) set(w *WaitingInput) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiting != nil && s.waiting.Kind == w.Kind {
		return false
	}
	s.waiting = w
	return true
}

func (s *inputState) quietSince(lastOutput time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastInput.After(lastOutput) {
		return s.lastInput
	}
	return lastOutput
}

// inputQuiet is the quiet spell after which a process is looked at;
// negative turns the watcher off.
func (r *Registry) inputQuiet() time.Duration {
	if r.cfg.InputQuiet == 0 {
		return DefaultInputQuiet
	}
	return r.cfg.InputQuiet
}

// watchInput starts the input watcher of a newly opened environment that
// can tell. Called once per slot, with watchHealth.
func (r *Registry) watchInput(target string, slot *envSlot) {
	iw, ok := slot.env.(env.InputWatcher)
	if !ok || r.inputQuiet() < 0 {
		return
	}
	r.goTracked(func() {
		r.everyTick(target, slot, inputTick, func() bool {
			if r.inputRound(target, iw) {
				return true
			}
			r.log.Debug("the backend cannot tell input waits", "backend", target)
			return false
		})
	})
}

// inputRound looks at target's candidates in one InputWaits call. It
// reports false when the backend said it cannot tell (a wrapper over an
// environment that cannot): no round is worth making again.
func (r *Registry) inputRound(target string, iw env.InputWatcher) bool {
	if h, _ := r.condition(target); h.Condition != env.ConditionOK {
		return true // a backend that does not answer is not asked
	}
	now := time.Now()
	quiet := r.inputQuiet()
	var procs []*proc
	var handles []env.Process
	for _, p := range r.selectProcs(ListOptions{Backend: target}) {
		if !p.mayRun() || p.opts.PTY == nil && !p.opts.Stdin {
			continue
		}
		marked := p.input.current() != nil
		if !marked && now.Sub(p.input.quietSince(time.Unix(0, p.lastOutput.Load()))) < quiet {
			continue
		}
		if h := p.currentHandle(); h != nil {
			procs, handles = append(procs, p), append(handles, h)
		}
	}
	if len(procs) == 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(r.ctx, inputTimeout)
	res, err := iw.InputWaits(ctx, handles)
	cancel()
	if r.ctx.Err() != nil {
		return true
	}
	if err == nil && len(res) != len(handles) {
		err = fmt.Errorf("InputWaits answered for %d processes, not %d", len(res), len(handles))
	}
	if err != nil {
		if errors.Is(err, env.ErrUnsupported) {
			return false
		}
		r.log.Debug("input waits", "backend", target, "err", err)
		return true
	}
	at := time.Now()
	for i, p := range procs {
		if res[i] == nil {
			p.input.clear(false)
			continue
		}
		// Output or input since the look began: the look is stale.
		if p.input.quietSince(time.Unix(0, p.lastOutput.Load())).After(now) {
			continue
		}
		p.markWaiting(&WaitingInput{Kind: res[i].Kind, Since: at, Prompt: lastLine(outputTail(p.buf, maxPrompt*4))})
	}
	return true
}

// markWaiting sets p's mark and, when it is news, says so in an event.
func (p *proc) markWaiting(w *WaitingInput) {
	if !p.input.set(w) {
		return
	}
	p.r.log.Info("waiting for input", "id", p.id, "kind", w.Kind)
	p.teeMu.Lock()
	if p.onInput != nil {
		p.onInput(*w)
	}
	p.teeMu.Unlock()
	summary := fmt.Sprintf("%s waits for input (%s)", p.label(), w.Kind)
	if w.Prompt != "" {
		summary += ": " + w.Prompt
	}
	p.r.ev.publish(Event{Type: EventWaitingInput, ID: p.id, Command: p.opts.Command, State: StateRunning,
		WaitingInput: w, Summary: summary})
}

// lastLine is the last non-blank line of text as a terminal shows it
// (what follows the last carriage return), at most maxPrompt bytes.
func lastLine(text string) string {
	lines := strings.Split(text, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := lines[i]
		if j := strings.LastIndexByte(strings.TrimRight(l, "\r"), '\r'); j >= 0 {
			l = l[j+1:]
		}
		l = strings.TrimRight(l, "\r")
		if strings.TrimSpace(l) == "" {
			continue
		}
		return clip(l, maxPrompt)
	}
	return ""
}
