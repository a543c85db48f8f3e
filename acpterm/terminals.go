package acpterm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/errclass"
	"github.com/corralhq/corral/internal/shellquote"
	"github.com/corralhq/corral/registry"
)

// Labels every terminal carries: SessionLabel holds the ACP session ID, so
// `corral ps --label acp-session=ID` lists a session's terminals and
// `corral kill --all --label acp-session=ID` ends them; ViaLabel says which
// front end started the process.
const (
	SessionLabel = "acp-session"
	ViaLabel     = "via"
	ViaValue     = "acp"
)

// JSON-RPC error codes the terminal methods answer with.
const (
	CodeInvalidParams    = -32602
	CodeInternalError    = -32603
	CodeResourceNotFound = -32002
)

// Config configures Terminals. Service is required; every other field has
// a usable zero value.
type Config struct {
	// Service runs the processes: the corral daemon's client, or a
	// *registry.Registry of the caller's own.
	Service registry.Service
	// Backend is the target every terminal starts on ("local",
	// "docker://web", "ssh://host", "NAME://…"); "" is the service's
	// default.
	Backend string
	// Dir is the working directory of a terminal whose request gives no
	// cwd; "" leaves it to the backend.
	Dir string
	// Environ is the environment terminals start from, as NAME=VALUE
	// (registry.StartOptions.Environ): corral acp passes its own, filtered
	// for credentials, on the local backend, where the daemon's would
	// apply otherwise. Nil: the backend's base environment.
	Environ []string
	// Env are variables every terminal gets on top of that, as
	// NAME=VALUE; the request's env is added after it and wins.
	Env []string
	// Labels are added to every terminal's labels.
	Labels map[string]string
	// Grace is the time between TERM and KILL when a terminal is killed or
	// released; 0 is the service's default.
	Grace time.Duration
	// Logger receives diagnostics; default slog.Default().
	Logger *slog.Logger
}

// Terminals implements the terminal methods of acp.Client (CreateTerminal,
// TerminalOutput, WaitForTerminalExit, KillTerminal, ReleaseTerminal) on
// corral processes. A terminal's ID is its corral process ID, so corral ps,
// logs and kill accept it too. Terminals is safe for concurrent use.
//
// Every error it returns is an *acp.RequestError whose message says what
// was wrong; the SDK sends it to the agent as is.
type Terminals struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	terms  map[string]*terminal
	closed bool

	// lease is the session every terminal lives under, opened by the
	// first terminal/create and ended by Close: should this process die
	// first, the daemon kills the terminals when the lease drops.
	leaseMu sync.Mutex
	lease   registry.SessionLease
}

// terminal is what Terminals remembers of one terminal/create.
type terminal struct {
	id      string // the corral process ID, also the ACP terminal ID
	session acp.SessionId
	limit   int // outputByteLimit; -1: none

	mu sync.Mutex
	// seen is the output size the last terminal/output saw: the next one
	// reads from limit bytes before it, which is all it can return.
	seen int64
}

// New returns Terminals that run their processes on cfg.Service.
func New(cfg Config) (*Terminals, error) {
	if cfg.Service == nil {
		return nil, errors.New("acpterm: Config.Service is required")
	}
	if cfg.Grace < 0 {
		return nil, fmt.Errorf("acpterm: Config.Grace %s is negative", cfg.Grace)
	}
	for _, kv := range cfg.Env {
		if name, _, ok := strings.Cut(kv, "="); !ok || !env.ValidEnvName(name) {
			return nil, fmt.Errorf("acpterm: Config.Env entry %q is not NAME=VALUE with a name matching [A-Za-z_][A-Za-z0-9_]*", kv)
		}
	}
	for _, kv := range cfg.Environ {
		if name, _, ok := strings.Cut(kv, "="); !ok || !env.ValidEnvName(name) {
			return nil, fmt.Errorf("acpterm: Config.Environ entry named %.64q is not NAME=VALUE with a name matching [A-Za-z_][A-Za-z0-9_]*", name)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	cfg.Labels = maps.Clone(cfg.Labels)
	return &Terminals{cfg: cfg, log: log, terms: make(map[string]*terminal)}, nil
}

// CreateTerminal starts params.Command on the configured backend and
// returns its terminal ID at once; the command runs in the background.
func (t *Terminals) CreateTerminal(ctx context.Context, p acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	opts, limit, err := t.startOptions(p)
	if err != nil {
		return acp.CreateTerminalResponse{}, err
	}
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return acp.CreateTerminalResponse{}, requestError(CodeInternalError, "terminal/create: the terminals are shut down (the agent or the editor went away)")
	}
	lease, err := t.holdLease(ctx)
	if err != nil {
		return acp.CreateTerminalResponse{}, serviceError("terminal/create", "", err)
	}
	opts.Session = lease.ID()
	info, err := t.cfg.Service.Start(ctx, opts)
	if err != nil {
		if info.ID != "" {
			// Registered as failed: no terminal ever existed for the agent,
			// which gets the reason now, so nothing is left to release.
			if rerr := t.cfg.Service.Remove(context.WithoutCancel(ctx), info.ID); rerr != nil {
				t.log.Debug("acp: failed terminal not removed", "id", info.ID, "err", rerr)
			}
		}
		return acp.CreateTerminalResponse{}, serviceError("terminal/create", "", err)
	}
	term := &terminal{id: info.ID, session: p.SessionId, limit: limit}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		// Close ran while the process started: it would never be found
		// again, so it must not outlive this call.
		_ = t.killVerified(context.WithoutCancel(ctx), "terminal/create", info.ID)
		return acp.CreateTerminalResponse{}, requestError(CodeInternalError, "terminal/create: the terminals are shut down (the agent or the editor went away)")
	}
	t.terms[info.ID] = term
	t.mu.Unlock()
	t.log.Debug("acp terminal created", "terminal", info.ID, "session", p.SessionId, "command", opts.Command)
	return acp.CreateTerminalResponse{TerminalId: info.ID}, nil
}

// startOptions turns a terminal/create request into the process to start,
// refusing what no backend could run.
func (t *Terminals) startOptions(p acp.CreateTerminalRequest) (registry.StartOptions, int, error) {
	if p.SessionId == "" {
		return registry.StartOptions{}, 0, invalidParams("terminal/create: sessionId is required")
	}
	if strings.TrimSpace(p.Command) == "" {
		return registry.StartOptions{}, 0, invalidParams("terminal/create: command is empty: give a program (with args) or a shell command line")
	}
	limit := -1
	if p.OutputByteLimit != nil {
		if *p.OutputByteLimit < 0 {
			return registry.StartOptions{}, 0, invalidParams(fmt.Sprintf("terminal/create: outputByteLimit %d is negative: give 0 or more bytes, or leave it out to keep all the output", *p.OutputByteLimit))
		}
		limit = *p.OutputByteLimit
	}
	for i, a := range append([]string{p.Command}, p.Args...) {
		if strings.IndexByte(a, 0) >= 0 {
			what := "command"
			if i > 0 {
				what = fmt.Sprintf("args[%d]", i-1)
			}
			return registry.StartOptions{}, 0, invalidParams(fmt.Sprintf("terminal/create: %s contains a NUL byte, which no program argument can carry", what))
		}
	}
	dir := t.cfg.Dir
	if p.Cwd != nil && *p.Cwd != "" {
		if !path.IsAbs(*p.Cwd) {
			return registry.StartOptions{}, 0, invalidParams(fmt.Sprintf("terminal/create: cwd %q is not an absolute path, as ACP requires: give the full path", *p.Cwd))
		}
		dir = *p.Cwd
	}
	environ := append([]string(nil), t.cfg.Env...)
	for _, v := range p.Env {
		if !env.ValidEnvName(v.Name) {
			return registry.StartOptions{}, 0, invalidParams(fmt.Sprintf("terminal/create: env name %q is not valid: names match [A-Za-z_][A-Za-z0-9_]*", v.Name))
		}
		if strings.IndexByte(v.Value, 0) >= 0 {
			return registry.StartOptions{}, 0, invalidParams(fmt.Sprintf("terminal/create: env %s contains a NUL byte", v.Name))
		}
		environ = append(environ, v.Name+"="+v.Value)
	}
	labels := maps.Clone(t.cfg.Labels)
	if labels == nil {
		labels = make(map[string]string, 2)
	}
	labels[ViaLabel] = ViaValue
	labels[SessionLabel] = string(p.SessionId)
	return registry.StartOptions{
		Backend: t.cfg.Backend,
		Command: CommandLine(p.Command, p.Args),
		Dir:     dir,
		Environ: t.cfg.Environ,
		Env:     environ,
		Labels:  labels,
	}, limit, nil
}

// CommandLine is the shell command line corral runs for a terminal/create
// of command and args. With args, the program and each argument are quoted
// into one word each and exec'd, so the program gets exactly these bytes
// and signals reach it, not a shell. Without args, command is the command
// line itself.
func CommandLine(command string, args []string) string {
	if len(args) == 0 {
		return command
	}
	return "exec " + shellquote.Join(append([]string{command}, args...))
}

// TerminalOutput returns the end of the terminal's output within its
// outputByteLimit, and its exit status once the command has exited.
func (t *Terminals) TerminalOutput(ctx context.Context, p acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	term, err := t.lookup("terminal/output", p.SessionId, p.TerminalId)
	if err != nil {
		return acp.TerminalOutputResponse{}, err
	}
	term.mu.Lock()
	defer term.mu.Unlock()
	since := int64(0)
	if term.limit >= 0 {
		since = max(0, term.seen-int64(term.limit))
	}
	res, err := t.cfg.Service.Poll(ctx, term.id, since)
	if err != nil {
		return acp.TerminalOutputResponse{}, serviceError("terminal/output", term.id, err)
	}
	term.seen = res.Next
	out, truncated := tailOutput(res, since, term.limit, res.State.Final())
	resp := acp.TerminalOutputResponse{Output: string(out), Truncated: truncated}
	if res.State.Final() {
		st := exitStatus(res.Info)
		resp.ExitStatus = &st
	}
	return resp, nil
}

// WaitForTerminalExit blocks until the terminal's command exits (or ctx
// ends: the agent cancelled the request, or went away).
func (t *Terminals) WaitForTerminalExit(ctx context.Context, p acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	term, err := t.lookup("terminal/wait_for_exit", p.SessionId, p.TerminalId)
	if err != nil {
		return acp.WaitForTerminalExitResponse{}, err
	}
	info, err := t.cfg.Service.Wait(ctx, term.id, 0)
	if err != nil {
		return acp.WaitForTerminalExitResponse{}, serviceError("terminal/wait_for_exit", term.id, err)
	}
	st := exitStatus(info)
	return acp.WaitForTerminalExitResponse{ExitCode: st.ExitCode, Signal: st.Signal}, nil
}

// KillTerminal ends the terminal's whole process tree (TERM, grace, KILL)
// and returns once nothing of it runs. The terminal stays: its output and
// exit status can still be read, and it must still be released.
func (t *Terminals) KillTerminal(ctx context.Context, p acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	term, err := t.lookup("terminal/kill", p.SessionId, p.TerminalId)
	if err != nil {
		return acp.KillTerminalResponse{}, err
	}
	if err := t.killVerified(ctx, "terminal/kill", term.id); err != nil {
		return acp.KillTerminalResponse{}, err
	}
	return acp.KillTerminalResponse{}, nil
}

// ReleaseTerminal kills what still runs of the terminal's tree, removes
// the process from corral and forgets the terminal: later calls with its
// ID fail with "unknown terminal".
func (t *Terminals) ReleaseTerminal(ctx context.Context, p acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	term, err := t.lookup("terminal/release", p.SessionId, p.TerminalId)
	if err != nil {
		return acp.ReleaseTerminalResponse{}, err
	}
	if err := t.killVerified(ctx, "terminal/release", term.id); err != nil && err.Code != CodeResourceNotFound {
		// Still tracked: the agent can retry, and Close still ends it.
		return acp.ReleaseTerminalResponse{}, err
	}
	t.mu.Lock()
	delete(t.terms, term.id)
	t.mu.Unlock()
	if err := t.cfg.Service.Remove(ctx, term.id); err != nil && !errors.Is(err, registry.ErrNotFound) {
		// The terminal is gone for the agent; the process record is left
		// for corral's pruning.
		t.log.Warn("acp terminal released, but its process was not removed", "terminal", term.id, "err", err)
	}
	return acp.ReleaseTerminalResponse{}, nil
}

// killVerified kills the tree of process id and fails unless nothing of
// it is left.
func (t *Terminals) killVerified(ctx context.Context, op, id string) *acp.RequestError {
	res, err := t.cfg.Service.Kill(ctx, id, registry.KillOptions{Grace: t.cfg.Grace})
	if err != nil {
		return serviceError(op, id, err)
	}
	if len(res.Survivors) > 0 {
		return requestError(CodeInternalError, fmt.Sprintf("%s: terminal %s: %d processes of its tree survived the kill (pids %v); corral keeps tracking them: retry, or see corral ps", op, id, len(res.Survivors), res.Survivors))
	}
	return nil
}

// holdLease returns the session the terminals live under, opening it on
// first use.
func (t *Terminals) holdLease(ctx context.Context) (registry.SessionLease, error) {
	t.leaseMu.Lock()
	defer t.leaseMu.Unlock()
	if t.lease == nil {
		lease, err := t.cfg.Service.OpenSession(ctx, registry.SessionOptions{})
		if err != nil {
			return nil, err
		}
		t.lease = lease
	}
	return t.lease, nil
}

// Close kills every terminal that was created and not released, whatever
// still runs of each tree; they stay in corral's list as killed. Then it
// ends the terminals' session. Later calls fail. It returns the kills
// that failed, joined.
func (t *Terminals) Close(ctx context.Context) error {
	t.mu.Lock()
	t.closed = true
	ids := t.idsLocked()
	t.terms = map[string]*terminal{}
	t.mu.Unlock()
	var errs []error
	for _, id := range ids {
		if err := t.killVerified(ctx, "close", id); err != nil && err.Code != CodeResourceNotFound {
			t.log.Warn("acp terminal not killed", "terminal", id, "err", err)
			errs = append(errs, err)
		}
	}
	t.leaseMu.Lock()
	lease := t.lease
	t.leaseMu.Unlock()
	if lease != nil {
		// Also ends what a terminal/create racing with Close started.
		if _, err := lease.End(ctx); err != nil {
			t.log.Warn("acp: end of the terminals' session", "session", lease.ID(), "err", err)
			errs = append(errs, fmt.Errorf("close: end the terminals' session %s: %w", lease.ID(), err))
		}
	}
	return errors.Join(errs...)
}

// Active lists the IDs of the terminals created and not yet released.
func (t *Terminals) Active() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.idsLocked()
}

func (t *Terminals) idsLocked() []string {
	ids := make([]string, 0, len(t.terms))
	for id := range t.terms {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (t *Terminals) lookup(op string, session acp.SessionId, id string) (*terminal, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	term := t.terms[id]
	if term == nil || term.session != session {
		in := ""
		if session != "" {
			in = fmt.Sprintf(" in session %q", session)
		}
		return nil, requestError(CodeResourceNotFound, fmt.Sprintf("%s: unknown terminal %q%s: it was released, or never created by terminal/create in this session", op, id, in))
	}
	return term, nil
}

// exitStatus is info's end in ACP's terms: the exit code, or the signal's
// name. A lost process (its sandbox vanished) has neither.
func exitStatus(info registry.Info) acp.TerminalExitStatus {
	var st acp.TerminalExitStatus
	if info.Status == nil {
		return st
	}
	if info.Status.Signal != "" {
		sig := info.Status.Signal.String()
		st.Signal = &sig
		return st
	}
	code := info.Status.Code
	st.ExitCode = &code
	return st
}

func requestError(code int, msg string) *acp.RequestError {
	return &acp.RequestError{Code: code, Message: msg}
}

func invalidParams(msg string) *acp.RequestError { return requestError(CodeInvalidParams, msg) }

// serviceError turns a registry error into the JSON-RPC error the agent
// gets: its own fault (a bad cwd, a bad option) is invalid params, a
// process corral no longer tracks is resource not found, the rest is an
// internal error; the message is corral's, which says what to do.
func serviceError(op, id string, err error) *acp.RequestError {
	what := op
	if id != "" {
		what += ": terminal " + id
	}
	msg := what + ": " + err.Error()
	switch errclass.Of(err) {
	case errclass.Invalid, errclass.InvalidSpec:
		return requestError(CodeInvalidParams, msg)
	case errclass.NotFound, errclass.ProcessGone:
		return requestError(CodeResourceNotFound, what+": corral no longer tracks its process (removed with corral rm, or pruned): "+err.Error())
	}
	if errors.Is(err, context.Canceled) {
		return requestError(-32800, msg)
	}
	return requestError(CodeInternalError, msg)
}
