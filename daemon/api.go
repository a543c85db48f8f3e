package daemon

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/duration"
	"github.com/corralhq/corral/internal/errclass"
	"github.com/corralhq/corral/registry"
)

// APIVersion is the path prefix of every endpoint.
const APIVersion = "/v1"

// StartRequest is the body of POST /v1/processes.
type StartRequest struct {
	Backend    string            `json:"backend,omitempty"`
	Command    string            `json:"command"`
	Dir        string            `json:"dir,omitempty"`
	Env        []string          `json:"env,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	Watch      []string          `json:"watch,omitempty"`
	WatchRegex []string          `json:"watch_regex,omitempty"`
	Notify     bool              `json:"notify,omitempty"`
	// PTY runs the command on a terminal of PTYSize (default 24x80).
	PTY     bool            `json:"pty,omitempty"`
	PTYSize *env.WindowSize `json:"pty_size,omitempty"`
	Stdin   bool            `json:"stdin,omitempty"`
	// Limits are hard ceilings on the tree (StartOptions.Limits): memory
	// in bytes, cpus in cores, pids in tasks. A backend that cannot
	// enforce one refuses the start (400, code unsupported).
	Limits *env.Limits `json:"limits,omitempty"`
	// Runaway are the process's runaway thresholds (StartOptions.Runaway:
	// cpu_percent, memory in bytes, for a Duration); without them the
	// daemon's (corral serve --runaway-*) apply.
	Runaway *registry.RunawayOptions `json:"runaway,omitempty"`

	// Environ is the caller's whole environment (StartOptions.Environ):
	// on the local backend the command's environment is Environ plus Env,
	// nothing of the daemon's. Without it, a local command starts from
	// the account's minimal environment (HOME, USER, LOGNAME, PATH).
	Environ []string `json:"environ,omitempty"`
	// Session is the session (POST /v1/sessions) the process lives under.
	Session string `json:"session,omitempty"`

	// Name, Replace, Ready, TTL and IdleTimeout are StartOptions'. TTL and
	// IdleTimeout are Durations (3600 or "1h"). In a RunRequest,
	// IdleTimeout is Run's (RunOptions.IdleTimeout): see RunRequest.
	Name        string                 `json:"name,omitempty"`
	Replace     bool                   `json:"replace,omitempty"`
	Ready       *registry.ReadyOptions `json:"ready,omitempty"`
	TTL         Duration               `json:"ttl,omitempty"`
	IdleTimeout Duration               `json:"idle_timeout,omitempty"`

	// Key makes the start idempotent (StartOptions.Key): a client whose
	// connection broke before the answer (ErrDaemonLost) repeats the
	// request with the same key and gets the process that started, or a
	// new one if none did.
	Key string `json:"key,omitempty"`
}

// Duration is the wire form of every duration of the API (request
// fields and query parameters): a JSON number is seconds (3600, 2.5), a
// string is a Go duration ("1h", "90s") or seconds ("90"); a negative
// value, a bool, an object or anything else is refused with a 400 (code
// invalid). It is written as a Go duration string. MCP tool arguments read
// durations the same way.
type Duration = duration.Duration

// Options is the request as the registry takes it.
func (req StartRequest) Options() registry.StartOptions {
	opts := registry.StartOptions{
		Backend: req.Backend, Command: req.Command, Dir: req.Dir, Env: req.Env, Labels: req.Labels,
		Watch: req.Watch, WatchRegex: req.WatchRegex, Notify: req.Notify, Stdin: req.Stdin,
		Name: req.Name, Replace: req.Replace, Ready: req.Ready, TTL: time.Duration(req.TTL), IdleTimeout: time.Duration(req.IdleTimeout),
		Key: req.Key, Limits: req.Limits, Runaway: req.Runaway,
	}
	opts.Environ, opts.Session = req.Environ, req.Session
	if req.PTY || req.PTYSize != nil {
		size := env.DefaultWindowSize
		if req.PTYSize != nil {
			size = *req.PTYSize
		}
		opts.PTY = &size
	}
	return opts
}

// startRequest is opts on the wire.
func startRequest(opts registry.StartOptions) StartRequest {
	req := StartRequest{
		Backend: opts.Backend, Command: opts.Command, Dir: opts.Dir, Env: opts.Env, Labels: opts.Labels,
		Watch: opts.Watch, WatchRegex: opts.WatchRegex, Notify: opts.Notify, Stdin: opts.Stdin,
		Name: opts.Name, Replace: opts.Replace, Ready: opts.Ready, TTL: Duration(opts.TTL), IdleTimeout: Duration(opts.IdleTimeout),
		Key: opts.Key, Limits: opts.Limits, Runaway: opts.Runaway,
	}
	req.Environ, req.Session = opts.Environ, opts.Session
	if opts.PTY != nil {
		size := *opts.PTY
		req.PTY, req.PTYSize = true, &size
	}
	return req
}

// RunRequest is the body of POST /v1/run: a foreground process whose
// output streams back on the same response (SSE events "started",
// "output" and one "end"). Durations are Durations; zero or absent means
// none (Grace: the daemon's default).
//
// idle_timeout, StartRequest's field, is Run's idle timeout here
// (RunOptions.IdleTimeout), as it always was on the wire. It has one field:
// RunRequest once had an IdleTimeout of its own under the same JSON key,
// which shadowed the embedded one.
//
// The connection is the process's lease: when the client goes away before
// "end" (killed, its terminal closed), the daemon kills the tree.
type RunRequest struct {
	StartRequest
	Timeout    Duration `json:"timeout,omitempty"`
	YieldAfter Duration `json:"yield_after,omitempty"`
	// YieldOnInput: "end" comes as soon as the process waits for input
	// (RunOptions.YieldOnInput), which a "waiting_input" event says first.
	YieldOnInput bool     `json:"yield_on_input,omitempty"`
	Grace        Duration `json:"grace,omitempty"`
}

// Options is the request as the registry takes it.
func (req RunRequest) Options() registry.RunOptions {
	opts := registry.RunOptions{StartOptions: req.StartRequest.Options(), Timeout: req.Timeout.D(),
		IdleTimeout: req.IdleTimeout.D(), YieldAfter: req.YieldAfter.D(), YieldOnInput: req.YieldOnInput, Grace: req.Grace.D()}
	opts.StartOptions.IdleTimeout = 0
	return opts
}

// runRequest is opts on the wire. idle_timeout is Run's; a run that sets
// only StartOptions.IdleTimeout, which in process kills the tree after as
// long without output too, sends that one, rather than losing it as the
// shadowed field did.
func runRequest(opts registry.RunOptions) RunRequest {
	req := RunRequest{StartRequest: startRequest(opts.StartOptions), Timeout: Duration(opts.Timeout),
		YieldAfter: Duration(opts.YieldAfter), YieldOnInput: opts.YieldOnInput, Grace: Duration(opts.Grace)}
	if opts.IdleTimeout > 0 {
		req.IdleTimeout = Duration(opts.IdleTimeout)
	}
	return req
}

// RunEnd is the "end" event of POST /v1/run: the result, and the error
// Run returned with it ("" when none).
type RunEnd struct {
	registry.RunResult
	Error string `json:"error,omitempty"`
	Code  string `json:"code,omitempty"`
}

// SubmitRequest is the body of POST /v1/processes/{id}/submit: Line is
// written followed by the key that submits it (Enter on a terminal).
type SubmitRequest struct {
	Line string `json:"line"`
}

// KillRequest is the body of POST /v1/processes/{id}/kill: the
// registry's KillOptions. Grace is a Duration (5 or "5s"); zero or absent
// means the daemon's default. Force is SIGKILL now; Escalate (default
// true) is SIGKILL after the grace, false never sends it.
type KillRequest struct {
	Signal   env.Signal `json:"signal,omitempty"`
	Grace    Duration   `json:"grace,omitempty"`
	Force    bool       `json:"force,omitempty"`
	Escalate *bool      `json:"escalate,omitempty"`
	// NoEscalate is the old name of escalate=false, still read so that a
	// client of an earlier release keeps working; never written.
	NoEscalate bool `json:"no_escalate,omitempty"`
}

// KillAllRequest is the body of POST /v1/kill: KillRequest's fields and
// the labels that select the processes.
type KillAllRequest struct {
	Labels     map[string]string `json:"labels,omitempty"`
	Signal     env.Signal        `json:"signal,omitempty"`
	Grace      Duration          `json:"grace,omitempty"`
	Force      bool              `json:"force,omitempty"`
	Escalate   *bool             `json:"escalate,omitempty"`
	NoEscalate bool              `json:"no_escalate,omitempty"`
}

// Options is the request as the registry takes it. It translates only;
// the registry's Kill checks the options.
func (req KillRequest) Options() (registry.KillOptions, error) {
	esc, err := escalate(req.Escalate, req.NoEscalate)
	return registry.KillOptions{Signal: req.Signal, Grace: req.Grace.D(), Force: req.Force, Escalate: esc}, err
}

// Options is the request as the registry takes it.
func (req KillAllRequest) Options() (registry.KillAllOptions, error) {
	esc, err := escalate(req.Escalate, req.NoEscalate)
	return registry.KillAllOptions{Labels: req.Labels, Signal: req.Signal, Grace: req.Grace.D(), Force: req.Force, Escalate: esc}, err
}

// escalate is a request's escalate, read from the old no_escalate when
// that is all it gives. Both given and saying opposite things is refused.
func escalate(esc *bool, noEscalate bool) (*bool, error) {
	switch {
	case !noEscalate:
		return esc, nil
	case esc != nil && *esc:
		return nil, fmt.Errorf("%w: escalate=true and no_escalate=true contradict each other (no_escalate is the old name of escalate=false)", registry.ErrInvalidOptions)
	}
	return new(false), nil
}

// killRequest is opts on the wire.
func killRequest(opts registry.KillOptions) KillRequest {
	return KillRequest{Signal: opts.Signal, Grace: Duration(opts.Grace), Force: opts.Force, Escalate: opts.Escalate}
}

// killAllRequest is opts on the wire.
func killAllRequest(opts registry.KillAllOptions) KillAllRequest {
	return KillAllRequest{Labels: opts.Labels, Signal: opts.Signal, Grace: Duration(opts.Grace), Force: opts.Force, Escalate: opts.Escalate}
}

// StdinRequest is the body of POST /v1/processes/{id}/stdin: Data is
// written (base64 in JSON), then stdin is closed when EOF is set.
type StdinRequest struct {
	Data []byte `json:"data,omitempty"`
	EOF  bool   `json:"eof,omitempty"`
}

// ResizeRequest is the body of POST /v1/processes/{id}/resize.
type ResizeRequest struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// WaitResponse answers POST /v1/processes/{id}/wait (also with ready=1:
// then the Info of a process that became ready has ReadyAt set, and one
// whose tree ended first is final with ReadyAt zero).
type WaitResponse struct {
	registry.Info
	// TimedOut: the wait's timeout elapsed first; Info is the current
	// snapshot and the process still runs.
	TimedOut bool `json:"wait_timed_out,omitempty"`
}

// ShutdownRequest is the body of POST /v1/shutdown.
type ShutdownRequest struct {
	// KillAll kills every running process (whole trees) before the
	// daemon stops. Without it, processes keep running and a later
	// daemon re-attaches them.
	KillAll bool `json:"kill_all,omitempty"`
}

// ShutdownResponse answers POST /v1/shutdown.
type ShutdownResponse struct {
	Killed []registry.KillResult `json:"killed,omitempty"`
	Error  string                `json:"error,omitempty"`
}

// Status answers GET /v1/status.
type Status struct {
	PID       int       `json:"pid"`
	UID       int       `json:"uid"`
	Version   string    `json:"version,omitempty"`
	StartedAt time.Time `json:"started_at"`
	Socket    string    `json:"socket"`
	StateFile string    `json:"state_file"`
	// Processes counts tracked processes by state.
	Processes map[registry.State]int `json:"processes"`
	// Recovered is what the daemon found in its state file at start; while
	// Recovered.Recovering is not 0, processes are still being
	// re-attached (listed recovering).
	Recovered registry.RecoverReport `json:"recovered"`
	// Notice is a problem the user should know about (a corrupt state
	// file that was set aside), "" when none.
	Notice string `json:"notice,omitempty"`
	// PeerCred: connections from other uids are refused by SO_PEERCRED
	// (Linux); elsewhere only file permissions protect the socket.
	PeerCred bool `json:"peer_cred"`
	// Dashboard is the dashboard's address (without its token) while it
	// is served; "" when not.
	Dashboard string `json:"dashboard,omitempty"`
	// Backends are the environments the daemon holds open (warm): one per
	// backend target, with the connection each keeps, if any.
	Backends []registry.BackendInfo `json:"backends"`
	// CheckpointWrites and CheckpointError describe the state file.
	CheckpointWrites int64  `json:"checkpoint_writes"`
	CheckpointError  string `json:"checkpoint_error,omitempty"`
}

// OutputChunk is one event of the output stream (GET
// /v1/processes/{id}/output?follow=1, SSE event "output").
type OutputChunk struct {
	// Offset is the output byte offset of Data[0].
	Offset int64  `json:"offset"`
	Data   []byte `json:"data"`
	// Omitted bytes are missing before Data (they fell out of the
	// buffer).
	Omitted int64 `json:"omitted,omitempty"`
}

// Error codes of ErrorBody.Code; see docs/api.md.
const (
	CodeInvalidID = "invalid_id"
	CodeNotFound  = "not_found"
	CodeAmbiguous = "ambiguous"
	CodeInvalid   = "invalid"
	// CodeInvalidSpec: the backend refused the command's spec before
	// anything ran (a --dir that does not exist in the sandbox): the
	// request was well formed, so a run reports it as a failed start.
	CodeInvalidSpec = "invalid_spec"
	CodeRunning     = "running"
	CodeNotRunning  = "not_running"
	CodeLimit       = "limit"
	CodeNameInUse   = "name_in_use"
	// CodeUnsupported: the backend cannot do what was asked (a limit it
	// cannot enforce, a feature it lacks); the message says why.
	CodeUnsupported = "unsupported"
	CodeClosed      = "closed"
	CodeForbidden   = "forbidden"
	CodeInternal    = "internal"
)

// FailedStartCodeHeader carries the error code of a start that failed
// after the process was registered (422, with the failed Info as body).
const FailedStartCodeHeader = "Corral-Error-Code"

// ErrorBody is the JSON body of every non-2xx response.
type ErrorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// APIError is an error the daemon answered with. It matches the registry
// sentinel its Code stands for (errors.Is(err, registry.ErrNotFound)).
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string { return e.Message }

// Is maps the code back to the registry's sentinels: to those of the class
// the code stands for. A refused spec is also an invalid request
// (registry.ErrInvalidOptions), as it was before it had a code of its own.
func (e *APIError) Is(target error) bool {
	return errclass.Match(target, codeClass[e.Code]) || e.Code == CodeInvalidSpec && errclass.Match(target, errclass.Invalid)
}

// httpError is how an error class is answered.
type httpError struct {
	status int
	code   string
}

// httpErrors is the HTTP translation of the error classes. The API speaks
// of the registry's classes, and of a spec the backend refused
// (invalid_spec: `corral run` tells a bad request, exit 2, from a start
// that failed, 125); stdin that is closed travels as stdin of a process
// not running, which a client acts on alike;
// Unsupported travels as itself, a request this backend cannot serve
// (the caller picks another backend or drops the option, as for a limit
// it cannot enforce), not a failure of the daemon; and the other env
// classes are backend failures, answered as internal errors.
// Every class is listed, so that a class added to errclass and forgotten
// here fails TestEveryClassCrossesHTTP.
var httpErrors = map[errclass.Class]httpError{
	errclass.InvalidID:   {http.StatusBadRequest, CodeInvalidID},
	errclass.Ambiguous:   {http.StatusBadRequest, CodeAmbiguous},
	errclass.NotFound:    {http.StatusNotFound, CodeNotFound},
	errclass.Invalid:     {http.StatusBadRequest, CodeInvalid},
	errclass.InvalidSpec: {http.StatusBadRequest, CodeInvalidSpec},
	errclass.Running:     {http.StatusConflict, CodeRunning},
	errclass.NotRunning:  {http.StatusConflict, CodeNotRunning},
	errclass.StdinClosed: {http.StatusConflict, CodeNotRunning},
	errclass.Limit:       {http.StatusTooManyRequests, CodeLimit},
	errclass.Closed:      {http.StatusServiceUnavailable, CodeClosed},
	errclass.NameInUse:   {http.StatusConflict, CodeNameInUse},
	errclass.Unsupported: {http.StatusBadRequest, CodeUnsupported},

	// Wait answers a timeout as a result (WaitResponse.TimedOut), never as
	// an error.
	errclass.WaitTimeout: {http.StatusInternalServerError, CodeInternal},
	errclass.ProcessGone: {http.StatusInternalServerError, CodeInternal},
	errclass.SandboxGone: {http.StatusInternalServerError, CodeInternal},
	errclass.Released:    {http.StatusInternalServerError, CodeInternal},
	errclass.Exited:      {http.StatusInternalServerError, CodeInternal},
	errclass.Unavailable: {http.StatusInternalServerError, CodeInternal},
}

// codeClass is the way back, for the client: the class each code stands
// for. A code that several classes travel as stands for the registry's.
var codeClass = map[string]errclass.Class{
	CodeInvalidID:   errclass.InvalidID,
	CodeAmbiguous:   errclass.Ambiguous,
	CodeNotFound:    errclass.NotFound,
	CodeInvalid:     errclass.Invalid,
	CodeInvalidSpec: errclass.InvalidSpec,
	CodeRunning:     errclass.Running,
	CodeNotRunning:  errclass.NotRunning,
	CodeLimit:       errclass.Limit,
	CodeClosed:      errclass.Closed,
	CodeNameInUse:   errclass.NameInUse,
	CodeUnsupported: errclass.Unsupported,
}

// errorCode maps an error of the registry to its HTTP status and code.
func errorCode(err error) (int, string) {
	if h, ok := httpErrors[errclass.Of(err)]; ok {
		return h.status, h.code
	}
	return http.StatusInternalServerError, CodeInternal
}

// ErrNoDaemon: no daemon answers on the socket (it does not exist, or
// nobody listens on it).
var ErrNoDaemon = errors.New("daemon: no corral daemon is running")

// ErrDaemonLost: the connection broke after the request was sent and
// before the answer came (the daemon stopped or crashed): whether the
// request took effect is unknown. A start with a key can be repeated on
// the next daemon (StartRequest.Key).
var ErrDaemonLost = errors.New("daemon: the corral daemon went away before it answered")

// ErrAlreadyRunning: another daemon holds the lock of the state directory.
var ErrAlreadyRunning = errors.New("daemon: another corral daemon is already running")

// parseDuration reads an optional duration query parameter (see
// Duration).
func parseDuration(name, s string) (time.Duration, error) {
	d, err := duration.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %w", registry.ErrInvalidOptions, name, err)
	}
	return d, nil
}
