package nohup

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/backoff"
	"github.com/corralhq/corral/internal/shellquote"
)

// Env is an env.Environment whose processes run as wrapped processes inside
// the sandbox a Transport reaches. Create it with New.
type Env struct {
	t    Transport
	opts Options

	mu        sync.Mutex
	closed    bool
	baseDir   string            // resolved lazily: the default needs `id -u`
	attached  map[*process]bool // live handles of processes started without Detach
	lastSweep time.Time
	spares    []string // IDs of armed spares for the next starts, oldest first
	// loose are spares taken by a start that failed without saying
	// whether it used them: the next start that can arm, and Close,
	// remove them (corral_dropspare leaves a used one alone).
	loose  []string
	starts int // Start calls so far

	noSetsidFork atomic.Bool // the sandbox's setsid refused -f once: use `setsid setsid`
	pty          ptyState    // what gives a command a terminal here (see pty.go)
	urlCheck     urlCheckState

	startSteps string        // sleepSteps of the start script's wait for the end
	pollSteps  string        // sleepSteps of one long poll
	longPolls  chan struct{} // one token per long poll in flight
	baseTurn   chan struct{} // one resolution of baseDir at a time

	cgroups   *cgroupState  // what ProbeLimits found; nil before (under mu)
	residents *residentPool // for a ShellTransport; nil otherwise
	states    stateBatcher  // Attach's state reads (attach.go)

	// Follows (see follow.go) run in goroutines of their own, with a
	// context that also ends with the Env: Close ends them and waits.
	life    context.Context
	endLife context.CancelFunc
	follows sync.WaitGroup
}

var (
	_ env.Environment   = (*Env)(nil)
	_ env.HealthChecker = (*Env)(nil)
)

// New returns an Env that runs processes through t. Nothing crosses the
// transport until the first call that needs the sandbox.
func New(t Transport, opts Options) (*Env, error) {
	if t == nil {
		return nil, errors.New("nohup: New: nil Transport")
	}
	opts = opts.withDefaults()
	if opts.BaseDir != "" && !validSafePath(opts.BaseDir) {
		return nil, fmt.Errorf("nohup: New: BaseDir %q: must be an absolute path of [A-Za-z0-9._/-] without . or .. elements", opts.BaseDir)
	}
	if !validSafePath(opts.Shell) {
		return nil, fmt.Errorf("nohup: New: Shell %q: must be an absolute path of [A-Za-z0-9._/-]", opts.Shell)
	}
	e := &Env{
		t: t, opts: opts, baseDir: opts.BaseDir, attached: map[*process]bool{},
		// A short command ends a few ms after the wrapper reports it
		// running: look soon and often, the wait is short anyway.
		startSteps: sleepSteps(opts.StartWait, time.Millisecond, 10*time.Millisecond),
		pollSteps:  sleepSteps(opts.LongPoll, 5*time.Millisecond, 50*time.Millisecond),
		longPolls:  make(chan struct{}, opts.MaxLongPolls),
		baseTurn:   make(chan struct{}, 1),
		pty:        ptyState{turn: make(chan struct{}, 1)},
	}
	e.life, e.endLife = context.WithCancel(context.Background())
	if st, ok := t.(ShellTransport); ok && opts.Residents > 0 {
		e.residents = &residentPool{Max: opts.Residents, Wait: residentWait, New: func(ctx context.Context, lib string) (*resident, error) {
			sh, err := st.OpenShell(ctx, residentScript(lib))
			if err != nil {
				return nil, err
			}
			return newResident(lib, sh.Stdin, sh.Stdout, sh.Stderr, sh.Stop), nil
		}}
	}
	return e, nil
}

// Name implements env.Environment.
func (e *Env) Name() string { return e.opts.Name }

// Capabilities implements env.Environment. PTY (with Resize and
// ReattachPTY) is true until a Start with a PTY found that the sandbox has
// no util-linux script (see pty.go): what the sandbox holds is only known
// once it was asked, and the first such Start fails with ErrUnsupported.
// Likewise CheckURL is true until a CheckURL found no HTTP client in the
// sandbox (see ports.go); Ports always is (/proc).
func (e *Env) Capabilities() env.Capabilities {
	pty := !e.pty.missing()
	ptyNote := "PTY through util-linux script in the sandbox, else python3 (a busybox-only sandbox has neither); with script, a command on a terminal killed by a signal other than KILL or HUP is reported as exit code 128+N"
	if !pty {
		ptyNote = "no PTY: the sandbox has neither util-linux script nor python3; commands run with pipes only"
	}
	limits, limitsNote := e.limitCaps()
	return env.Capabilities{
		PTY:           pty,
		Resize:        pty,
		ReattachPTY:   pty,
		Stdin:         true,
		Reattach:      true,
		ReplayOutput:  true,
		TreeKill:      "pgroup+scan",
		Ports:         true,
		InputWait:     true,
		CheckURL:      !e.urlCheck.missing.Load(),
		Limits:        limits,
		LimitsNote:    limitsNote,
		SandboxLimits: e.opts.SandboxLimits,
		Notes: []string{
			ptyNote,
			"escapees are found by the CORRAL_TREE variable they inherit; a process that clears its environment escapes the tree kill",
			"exit status read from /proc (Linux 3.5+); a follower sees an exit within ~20ms of a young process (500ms of one quiet for long) inside the sandbox, plus the stream's latency",
			"ports read from /proc/net/tcp(6) in the tree's network namespace; a port wait looks every 10ms inside the sandbox; URL checks use curl, wget or python3 in the sandbox (CheckURL turns off once a check found none)",
		},
	}
}

func (e *Env) checkOpen() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return fmt.Errorf("nohup %s: %w", e.opts.Name, env.ErrReleased)
	}
	return nil
}

// call runs one call of a lib function (see call in scripts.go) and returns
// its stdout, as exec does.
func (e *Env) call(ctx context.Context, what, line string, retry bool) ([]byte, error) {
	return e.callThen(ctx, what, line, "", nil, retry)
}

// callThen is call with after: more lib calls that a resident shell runs
// once call's results have been returned, in another subshell with stdin,
// stdout and stderr on /dev/null, while nobody waits: work that readies
// the sandbox for the next call (arming spares). Best effort: without a
// resident, after is skipped; sent (when not nil) is set when a resident
// shell took it.
func (e *Env) callThen(ctx context.Context, what, line, after string, sent *bool, retry bool) ([]byte, error) {
	if e.residents != nil {
		return e.run(ctx, what, retry, func(out, errb *bytes.Buffer) (int, error) {
			return e.residentCall(ctx, line, after, sent, out, errb)
		})
	}
	return e.exec(ctx, what, lib+line, nil, retry)
}

// residentCall runs line, then after, on a resident shell, or through Exec
// (without after) when none is free or none can be started. A resident that
// breaks mid-call leaves the result unknown: that is ErrUnavailable, which
// callers that may repeat the call retry, on another resident.
func (e *Env) residentCall(ctx context.Context, line, after string, sent *bool, out, errb *bytes.Buffer) (int, error) {
	if ct, ok := e.t.(CallTracker); ok {
		defer ct.TrackCall()()
	}
	code, err := e.residents.Call(ctx, lib, line, after, out, errb)
	switch {
	case err == nil:
		if sent != nil && after != "" {
			*sent = true
		}
		if code != 0 && ForkFailed(errb.Bytes()) {
			// The subshell that was to run the call could not be forked:
			// nothing ran.
			return -1, fmt.Errorf("resident shell: cannot fork (pids limit reached?): %.200s: %w",
				bytes.TrimSpace(errb.Bytes()), env.ErrUnavailable)
		}
		if code > 128 && code <= 128+64 {
			// No library function exits so: the subshell running the
			// call was killed (by the OOM killer, a kill of the
			// resident's processes), part way through.
			return -1, fmt.Errorf("resident shell: the call's shell was killed by signal %d part way through: %w",
				code-128, env.ErrUnavailable)
		}
		return code, nil
	case errors.Is(err, errNoResident):
		e.opts.Logger.Debug("nohup: no resident shell; running the call through Exec", "env", e.opts.Name, "err", err)
		out.Reset()
		errb.Reset()
		return e.t.Exec(ctx, lib+line, nil, out, errb)
	case ctx.Err() != nil:
		return -1, ctx.Err()
	}
	return -1, fmt.Errorf("resident shell: %w: %w", env.ErrUnavailable, err)
}

// exec runs one script and returns its stdout. With retry, errors matching
// env.ErrUnavailable are retried with backoff until ctx is done.
func (e *Env) exec(ctx context.Context, what, scr string, stdin io.Reader, retry bool) ([]byte, error) {
	return e.run(ctx, what, retry, func(out, errb *bytes.Buffer) (int, error) {
		return e.t.Exec(ctx, scr, stdin, out, errb)
	})
}

func (e *Env) run(ctx context.Context, what string, retry bool, exec func(out, errb *bytes.Buffer) (int, error)) ([]byte, error) {
	// A transport that is down (a reconnecting ssh connection) is asked
	// again soon, then less and less often.
	retries := backoff.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second, Factor: 2}
	for {
		var out, errb bytes.Buffer
		code, err := exec(&out, &errb)
		if err == nil {
			if code != 0 {
				return out.Bytes(), fmt.Errorf("nohup %s: %s: script exit status %d: %s", e.opts.Name, what, code, strings.TrimSpace(errb.String()))
			}
			return out.Bytes(), nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("nohup %s: %s: %w", e.opts.Name, what, ctx.Err())
		}
		if !retry || !errors.Is(err, env.ErrUnavailable) {
			// What arrived before the failure: Start needs its ok line.
			return out.Bytes(), fmt.Errorf("nohup %s: %s: %w", e.opts.Name, what, err)
		}
		delay := retries.Next()
		e.opts.Logger.Debug("nohup: transport unavailable, retrying", "env", e.opts.Name, "op", what, "err", err, "delay", delay)
		if err := backoff.Sleep(ctx, delay, nil); err != nil {
			return nil, fmt.Errorf("nohup %s: %s: %w", e.opts.Name, what, err)
		}
	}
}

// base returns the resolved BaseDir.
func (e *Env) base(ctx context.Context) (string, error) {
	resolved := func() string {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.baseDir
	}
	if b := resolved(); b != "" {
		return b, nil
	}
	// One resolution at a time: a hundred concurrent first starts ran
	// `id -u` a hundred times, and under load some of them timed out.
	// A failed one leaves the next caller to try again.
	select {
	case e.baseTurn <- struct{}{}:
	case <-ctx.Done():
		return "", fmt.Errorf("nohup %s: resolve base dir: %w", e.opts.Name, ctx.Err())
	}
	defer func() { <-e.baseTurn }()
	if b := resolved(); b != "" {
		return b, nil
	}
	out, err := e.call(ctx, "resolve base dir", call("corral_uid"), true)
	if err != nil {
		return "", err
	}
	uid := strings.TrimSpace(string(out))
	if _, err := strconv.ParseUint(uid, 10, 32); err != nil {
		return "", fmt.Errorf("nohup %s: resolve base dir: `id -u` said %q", e.opts.Name, uid)
	}
	b := "/tmp/.corral-" + uid
	e.mu.Lock()
	e.baseDir = b
	e.mu.Unlock()
	return b, nil
}

func newHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// Start implements env.Environment. Every process is detached inside the
// sandbox (it survives the supervisor, and Ref works whatever Spec.Detach
// says); Spec.Detach only decides whether Close kills it.
func (e *Env) Start(ctx context.Context, spec env.Spec) (env.Process, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if spec.Limits != nil {
		if err := env.CheckLimits(e.opts.Name, e.Capabilities(), *spec.Limits); err != nil {
			return nil, err
		}
	}
	base, err := e.base(ctx)
	if err != nil {
		return nil, err
	}
	var pty ptyTool
	if spec.PTY != nil {
		if pty, err = e.ptyTool(ctx); err != nil {
			return nil, fmt.Errorf("nohup %s: start: %w", e.opts.Name, err)
		}
	}
	tag := newHex(16)
	dir := spec.Dir
	if dir != "" && !strings.HasPrefix(dir, "/") {
		// cd must never read a relative Dir as an option or as "-".
		dir = "./" + dir
	}
	// The engine's first start, then one an hour, sweeps: the spares whose
	// resident shell is gone, and what is older than Retention.
	sweep := "0"
	e.mu.Lock()
	if time.Since(e.lastSweep) > time.Hour {
		e.lastSweep = time.Now()
		sweep = "-1"
		if e.opts.Retention > 0 {
			sweep = strconv.Itoa(max(1, int(e.opts.Retention/time.Minute)))
		}
	}
	e.mu.Unlock()
	si := "0"
	if spec.Stdin || spec.PTY != nil {
		// A terminal's input is the FIFO even without Spec.Stdin: then
		// nobody writes to it and it never ends, so a command reading its
		// terminal waits (as on env/local) instead of reading ^D.
		si = "1"
	}
	sf := "1"
	if e.noSetsidFork.Load() {
		sf = "0"
	}
	// The next starts' directories are armed (their processes waiting)
	// after this one's reply, by a transport that can run work then.
	canArm := e.residents != nil && !e.residents.Disabled()
	var (
		id, put      string
		armed        bool
		toArm, loose []string
	)
	if len(spec.Command) > env.InlineCommandMax {
		// Too long for argv, and for a resident shell's line reads: the
		// command goes in first, on the stdin of an Exec, into a new
		// process directory (an armed spare's is the armer's), and the
		// command's shell sources it (see env.InlineCommandMax).
		id = newHex(16)
		put = base + "/" + id
		scr, command := script(putBody, base, put), spec.Command
		out, err := e.run(ctx, "start: bring the command in", true, func(out, errb *bytes.Buffer) (int, error) {
			return e.t.Exec(ctx, scr, strings.NewReader(command), out, errb) // a fresh reader for each try
		})
		if err != nil || strings.TrimSpace(string(out)) != "ok" {
			e.dropPut(put)
			if err == nil {
				err = fmt.Errorf("the sandbox said %q", trunc(out))
			}
			return nil, fmt.Errorf("nohup %s: start: write the %d-byte command to %s: %w", e.opts.Name, len(spec.Command), put, err)
		}
		spec.Command = ". " + shellquote.Quote(put+"/command")
	} else {
		id, armed, toArm, loose = e.takeSpare(canArm)
	}
	kind := ""
	if armed {
		kind = "armed"
	}
	var after strings.Builder
	if len(toArm) > 0 {
		dirs := make([]string, len(toArm))
		for i, a := range toArm {
			dirs[i] = base + "/" + a
		}
		after.WriteString(sparesLine(dirs))
	}
	for _, a := range toArm {
		after.WriteString(call("corral_arm", base+"/"+a, e.opts.Shell, sf))
	}
	for _, a := range loose {
		after.WriteString(call("corral_dropspare", base+"/"+a))
	}
	command, environ := spec.Command, spec.Env
	if spec.PTY != nil {
		command, environ = ptyCmdBody, e.ptyEnviron(spec, pty, base+"/"+id)
	}
	line := call("corral_launch", base, id, dir, si, tag, e.opts.Shell, specFile(command, dir, si, tag, spec.Tag, environ), sweep,
		strconv.FormatInt(e.opts.ChunkSize, 10), e.startSteps, sf, kind, limitArg(spec.Limits))
	var afterSent bool
	out, err := e.callThen(ctx, "start", line, after.String(), &afterSent, false)
	if !afterSent {
		e.loosen("", false, loose)
		loose = nil
	}
	first, rest, whole := bytes.Cut(out, []byte("\n"))
	if err != nil {
		// The launcher prints its ok line as soon as the command runs. A
		// failure after it (a fork for the report refused by a full pids
		// limit, the connection cut) must not leave a running command
		// that nobody tracks: only its report is lost, and polls redo it.
		if !whole || !bytes.HasPrefix(first, []byte("ok ")) {
			// Whether the launcher got to the spare is unknown: it is
			// removed later.
			e.loosen(id, armed, nil)
			e.dropPut(put)
			return nil, fmt.Errorf("nohup %s: start: %w", e.opts.Name, err)
		}
		e.opts.Logger.Warn("nohup: start: the command runs, but its launcher failed after reporting it",
			"env", e.opts.Name, "err", err)
		rest = nil
	}
	line = strings.TrimSpace(string(first))
	if !strings.HasPrefix(line, "ok ") {
		e.dropPut(put)
	}
	if r, detail, ok := launchRefused(line); ok {
		if r.spareKept {
			// Refused before the launcher touched the spare: the next
			// start takes it.
			e.unspare(id, armed)
		} else {
			e.loosen(id, armed, nil)
		}
		return nil, r.err(e, spec, detail)
	}
	f := strings.Fields(line)
	if len(f) == 6 && f[5] == "nof" {
		// This sandbox's setsid has no -f (busybox): do not ask again.
		e.noSetsidFork.Store(true)
		f = f[:5]
	}
	if len(f) != 5 || f[0] != "ok" {
		e.loosen(id, armed, nil)
		return nil, fmt.Errorf("nohup %s: start: wrapper failed: %q", e.opts.Name, trunc([]byte(line)))
	}
	ref := refData{Version: 1, Dir: base + "/" + id, Tag: tag, Stdin: spec.Stdin, PTY: spec.PTY != nil}
	nums := []*int64{&ref.PID, &ref.Start, &ref.WPID, &ref.WStart}
	for i, s := range f[1:] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("nohup %s: start: wrapper said %q", e.opts.Name, trunc([]byte(line)))
		}
		*nums[i] = n
	}
	p := e.newProcess(ref)
	// The report is cached for Wait and the first Output (see
	// process.first). A lost or unreadable state is left for Wait to find
	// and report; a garbled report only costs the round trips it saved.
	if rest != nil { // nil: the launcher failed after its ok line
		if rep, err := parseReport(rest); err != nil {
			e.opts.Logger.Warn("nohup: start: ignoring the first report", "env", e.opts.Name, "pid", ref.PID, "err", err)
		} else {
			if s, done, err := p.parseState(rep.state); done && err == nil {
				p.setStatus(s)
			}
			p.first = &rep
		}
	}
	if !spec.Detach {
		e.mu.Lock()
		e.attached[p] = true
		e.mu.Unlock()
	}
	e.opts.Logger.Debug("nohup: started", "env", e.opts.Name, "pid", ref.PID, "dir", ref.Dir)
	return p, nil
}

// dropPut removes the process directory into which a long command was
// brought (put; "" for none) when its start failed: best effort, bounded,
// whatever the start's own context.
func (e *Env) dropPut(put string) {
	if put == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.call(ctx, "start: drop the command", call("corral_rmspare", put), false); err != nil {
		e.opts.Logger.Debug("nohup: start: could not remove the directory of a failed start", "env", e.opts.Name, "dir", put, "err", err)
	}
}

// armedSpares is how many armed spares an engine keeps ready: two, so that
// back-to-back starts find one whose arming (a few milliseconds of forks
// and execs after the previous reply) has finished.
const armedSpares = 2

// takeSpare returns the ID for a new process's state directory (armed: a
// spare that a resident shell was asked to arm, see corral_arm in sh/spares.sh) and the IDs
// of the spares this start
// arms: only when the transport can, and never on the engine's first
// start, since a one-shot engine would pay for spares it never uses.
// Other transports get no spares: making the directory ahead would need a
// process that outlives its call (and could outlive Close), to save one
// mkdir on a start that costs a whole exec anyway.
//
// A start that can arm also takes the loose spares, to remove them after
// its reply.
func (e *Env) takeSpare(canArm bool) (id string, armed bool, toArm, loose []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.spares) > 0 {
		id, armed = e.spares[0], true
		e.spares = e.spares[1:]
	} else {
		id = newHex(16)
	}
	if canArm && e.starts > 0 {
		for len(e.spares)+len(toArm) < armedSpares {
			toArm = append(toArm, newHex(16))
		}
		e.spares = append(e.spares, toArm...)
	}
	if canArm {
		loose, e.loose = e.loose, nil
	}
	e.starts++
	return id, armed, toArm, loose
}

// unspare gives back the spare id of a start that the launcher refused
// before it touched the spare: the next start takes it.
func (e *Env) unspare(id string, armed bool) {
	if !armed {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.closed {
		e.spares = append([]string{id}, e.spares...)
	}
}

// loosen records the spare id of a failed start (when armed), and the
// loose spares the start was to remove, as loose: unused as far as anyone
// knows, and armed or being armed in the sandbox. A spare that was lost
// track of so outlived its engine, and every kill: the shell that armed
// it ends it only when the engine or its connection goes away.
func (e *Env) loosen(id string, armed bool, loose []string) {
	if armed {
		loose = append(loose, id)
	}
	if len(loose) == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.loose = append(e.loose, loose...)
}

// refData is Ref.Data: everything needed to find the process again.
type refData struct {
	Version int    `json:"v"`
	Dir     string `json:"dir"`
	PID     int64  `json:"pid"`
	Start   int64  `json:"start"`  // clock ticks since boot, /proc/PID/stat field 22
	WPID    int64  `json:"wpid"`   // the wrapper that writes the exit file
	WStart  int64  `json:"wstart"` // its start time
	Tag     string `json:"tag"`    // CORRAL_TREE value of the tree
	Stdin   bool   `json:"stdin"`
	PTY     bool   `json:"pty,omitempty"` // on a terminal (see pty.go)
}

func (r refData) validate(base string) error {
	if r.Version != 1 {
		return fmt.Errorf("unknown version %d", r.Version)
	}
	if !strings.HasPrefix(r.Dir, base+"/") || !idPattern.MatchString(strings.TrimPrefix(r.Dir, base+"/")) {
		if d, id := path.Split(r.Dir); validSafePath(path.Clean(d)) && idPattern.MatchString(id) {
			// A process directory, but under another BaseDir: made by an
			// Env opened with other Options, which this one cannot see.
			return fmt.Errorf("process directory %s is not under this environment's BaseDir %s (keep Options.BaseDir the same across opens of one target): %w",
				r.Dir, base, env.ErrNotFound)
		}
		return fmt.Errorf("dir %q is not %s/<32 hex digits>", r.Dir, base)
	}
	if r.PID <= 0 || r.Start <= 0 || r.WPID <= 0 || r.WStart <= 0 {
		return errors.New("pid or start time missing")
	}
	if !idPattern.MatchString(r.Tag) {
		return fmt.Errorf("tag %q is not 32 hex digits", r.Tag)
	}
	return nil
}

// Attach implements env.Environment.
func (e *Env) Attach(ctx context.Context, ref env.Ref) (env.Process, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	if ref.Env != "" && ref.Env != e.opts.Name {
		return nil, fmt.Errorf("nohup %s: attach: ref belongs to environment %q: %w", e.opts.Name, ref.Env, env.ErrNotFound)
	}
	var r refData
	dec := json.NewDecoder(bytes.NewReader(ref.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("nohup %s: attach: bad ref data: %w", e.opts.Name, err)
	}
	base, err := e.base(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.validate(base); errors.Is(err, env.ErrNotFound) {
		return nil, fmt.Errorf("nohup %s: attach: %w", e.opts.Name, err)
	} else if err != nil {
		return nil, fmt.Errorf("nohup %s: attach: bad ref data: %w", e.opts.Name, err)
	}
	p := e.newProcess(r)
	st, err := e.attachState(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}
	if st == "gone" {
		return nil, fmt.Errorf("nohup %s: attach: %s: %w", e.opts.Name, r.Dir, env.ErrNotFound)
	}
	// The state just read already says whether the process ended while
	// nobody was attached: keep it, so Wait answers without another round
	// trip (a supervisor recovering many processes asks every one at once).
	if s, done, err := p.parseState(st); err == nil && done {
		p.setStatus(s)
	}
	return p, nil
}

// Close implements env.Environment: it kills (SIGKILL, whole tree) the
// processes started without Spec.Detach whose handles were not released,
// then runs Options.OnClose.
func (e *Env) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	procs := make([]*process, 0, len(e.attached))
	for p := range e.attached {
		procs = append(procs, p)
	}
	e.attached = nil
	spares, base := append(e.spares, e.loose...), e.baseDir
	e.spares, e.loose = nil, nil
	e.mu.Unlock()

	var errs []error
	e.endLife()
	e.follows.Wait() // before the residents close: an abandoned follow's unfollow may use one
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if len(spares) > 0 && base != "" {
		// Best effort: what an Env that is not closed leaves, the sweep
		// removes.
		var drop strings.Builder
		for _, id := range spares {
			drop.WriteString(call("corral_dropspare", base+"/"+id))
		}
		if _, err := e.call(ctx, "remove spares", drop.String(), false); err != nil {
			e.opts.Logger.Debug("nohup: close: spare directories left for the sweep", "env", e.opts.Name, "err", err)
		}
	}
	for _, p := range procs {
		if err := p.signal(ctx, env.SIGKILL); err != nil && !errors.Is(err, env.ErrExited) && !errors.Is(err, env.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	if e.residents != nil {
		e.residents.Close()
	}
	if e.opts.OnClose != nil {
		if err := e.opts.OnClose(); err != nil {
			errs = append(errs, fmt.Errorf("nohup %s: close: %w", e.opts.Name, err))
		}
	}
	return errors.Join(errs...)
}

// ConnStatus implements env.ConnReporter with the transport's report; the
// zero ConnStatus (no State) when the transport keeps nothing open.
func (e *Env) ConnStatus() env.ConnStatus {
	if r, ok := e.t.(env.ConnReporter); ok {
		return r.ConnStatus()
	}
	return env.ConnStatus{}
}

// Health implements env.HealthChecker: the transport's own check when it
// has one (docker asks the engine about the container, ssh sends a
// keepalive), else one trivial call into the sandbox, which must answer
// within ctx. Nothing else is asked of a sandbox whose transport checked
// it: a check must not queue behind the calls it is meant to judge.
func (e *Env) Health(ctx context.Context) env.Health {
	if err := e.checkOpen(); err != nil {
		return env.Health{Condition: env.ConditionUnreachable, Detail: "the environment was closed"}
	}
	if hc, ok := e.t.(env.HealthChecker); ok {
		return hc.Health(ctx)
	}
	_, err := e.call(ctx, "health", call("corral_uid"), false)
	return healthOf(ctx, err)
}

// healthOf is the health a call's outcome shows: ok without an error,
// gone for env.ErrSandboxGone, else unreachable, with the error (clipped)
// as the detail; a call cut by ctx's deadline did not answer in time.
func healthOf(ctx context.Context, err error) env.Health {
	switch {
	case err == nil:
		return env.Health{Condition: env.ConditionOK}
	case errors.Is(err, env.ErrSandboxGone):
		return env.Health{Condition: env.ConditionGone, Detail: clipDetail(err.Error())}
	case ctx.Err() != nil:
		return env.Health{Condition: env.ConditionUnreachable, Detail: "it did not answer a health check in time"}
	}
	return env.Health{Condition: env.ConditionUnreachable, Detail: clipDetail(err.Error())}
}

// clipDetail keeps a health detail to one short line.
func clipDetail(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= 200 {
		return s
	}
	cut := 200
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func (e *Env) forget(p *process) {
	e.mu.Lock()
	delete(e.attached, p)
	e.mu.Unlock()
}

var errClosed = errors.New("nohup: output reader closed")
