package nohup

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A resident is a shell that stays running inside the sandbox with the
// engine's library loaded and runs one call after another, each in a
// subshell, so that a call costs one write and one read on streams that are
// already open: no new session, no new shell, no library to parse. A
// transport brings the streams (an ssh session, a docker exec attach, a
// local process); resident speaks the protocol and residentPool shares
// residents between callers.
//
// The protocol. The transport starts residentScript(lib) as the shell's
// script. A request is a nonce line, the call's lines, the nonce line, the
// after lines (see Env.callThen; maybe none) and the nonce line again; the
// nonce ("corral-" and 32 random hex digits) is new for every request and
// never a line of call or after. The shell runs the call as
// `( eval CALL ) </dev/null`, then prints "\nNONCE CODE\n" on stdout and
// "\nNONCE\n" on stderr, which end the call's output on each stream, and
// then runs after the same way with all three streams on /dev/null. A
// trailer cannot be forged by accident: the nonce is fresh and the shell
// writes nothing else. The shell reads requests with the read builtin, a
// byte per system call, so calls are kept short: everything constant is in
// lib, which travels once, as part of the script.
//
// Spares die with the shell that armed them. An after section that arms
// spares starts with the line "#spares DIR..." (a comment to eval), from
// which the shell keeps the last few directories it armed; when it reads
// end of file (its engine closed it, the session, exec or connection
// carrying it went away) or is hung up or terminated, it removes them
// (corral_endspare) and exits. A spare whose shell was killed outright is
// removed by the next engine's sweep (corral_sweepspares), which finds its
// armer gone.

// residentLoop serves requests; see the protocol above. Its variables are
// prefixed so that they cannot clash with the library's. The traps are
// caught, not ignored, so the subshells that run calls, and the commands
// they start, get the default dispositions back.
const residentLoop = `corral_sp=
corral_section() {
	corral_s=
	while :; do
		IFS= read -r corral_l || corral_bye
		[ "$corral_l" = "$corral_n" ] && return 0
		corral_s=$corral_s$corral_l'
'
	done
}
corral_keep() {
	corral_sp= corral_k=0
	for corral_x in "$@"; do
		[ "$corral_k" -lt 8 ] || break
		corral_sp="$corral_sp $corral_x" corral_k=$((corral_k+1))
	done
}
corral_bye() {
	trap '' HUP PIPE TERM
	for corral_x in $corral_sp; do ( corral_endspare "$corral_x" ) </dev/null >/dev/null 2>&1; done
	exit 0
}
corral_serve() {
	while IFS= read -r corral_n; do
		corral_section
		corral_b=$corral_s
		corral_section
		corral_a=$corral_s
		( eval "$corral_b" ) </dev/null
		printf '\n%s %s\n' "$corral_n" "$?"
		printf '\n%s\n' "$corral_n" >&2
		case $corral_a in
		'#spares '*) corral_l=${corral_a%%'
'*}; corral_keep ${corral_l#'#spares '} $corral_sp ;;
		esac
		if [ -n "$corral_a" ]; then ( eval "$corral_a" ) </dev/null >/dev/null 2>&1; fi
	done
	corral_bye
}
trap corral_bye HUP PIPE TERM
corral_serve
`

// sparesLine is the first line of an after section that arms the spares
// in dirs (see the protocol above): the shell that runs it ends them when
// it ends. dirs are BaseDir/ID paths, which need no quoting.
func sparesLine(dirs []string) string {
	return "#spares " + strings.Join(dirs, " ") + "\n"
}

// residentScript returns the script a transport starts (as /bin/sh -c
// SCRIPT, with stdin, stdout and stderr connected to a resident) to make a
// resident shell with lib loaded.
func residentScript(lib string) string { return lib + "\n" + residentLoop }

// errResidentBroken is returned (wrapped) by resident.Call when the
// resident can no longer be used: its streams ended or failed, or a call
// was abandoned. The call's result is unknown.
var errResidentBroken = errors.New("resident shell broken")

// resident is the supervisor's side of one resident shell. Calls are run
// one at a time; it is not safe for concurrent use.
type resident struct {
	lib    string
	in     io.Writer
	out    *bufio.Reader
	errs   *bufio.Reader
	close  func() error
	broken error
	served int // calls completed
}

// newResident returns the resident that talks to a shell started with
// residentScript(lib) through its stdin, stdout and stderr. closeFn ends the
// shell and its streams; it must make blocked reads on stdout and stderr
// return (Call uses it to abandon a call whose ctx is done).
func newResident(lib string, stdin io.Writer, stdout, stderr io.Reader, closeFn func() error) *resident {
	return &resident{
		lib: lib, in: stdin, close: closeFn,
		out:  bufio.NewReaderSize(stdout, 64<<10),
		errs: bufio.NewReaderSize(stderr, 4<<10),
	}
}

// Lib returns the library the shell was started with.
func (r *resident) Lib() string { return r.lib }

// Served returns how many calls completed on this resident.
func (r *resident) Served() int { return r.served }

// Close ends the shell. Idempotent.
func (r *resident) Close() error {
	if r.broken == nil {
		r.broken = fmt.Errorf("%w: closed", errResidentBroken)
	}
	return r.close()
}

// Call runs call (lines of sh; a missing final newline is added) and copies
// its stdout and stderr (either may be nil: discarded) up to the trailers;
// then the shell runs after (see Env.callThen), while the next call waits.
// It returns the call's exit code. An error leaves the resident broken
// (matching errResidentBroken, or ctx's error when ctx ended the call):
// Close it.
func (r *resident) Call(ctx context.Context, call, after string, stdout, stderr io.Writer) (int, error) {
	if r.broken != nil {
		return -1, r.broken
	}
	if err := ctx.Err(); err != nil {
		// Nothing was sent: the resident is still good.
		return -1, err
	}
	nonce := "corral-" + newHex(16)
	for strings.Contains(call, nonce) || strings.Contains(after, nonce) {
		nonce = "corral-" + newHex(16)
	}
	if !strings.HasSuffix(call, "\n") {
		call += "\n"
	}
	if after != "" && !strings.HasSuffix(after, "\n") {
		after += "\n"
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	// ctx ending mid-call closes the streams, which unblocks the reads.
	stop := context.AfterFunc(ctx, func() { _ = r.close() })
	fail := func(err error) (int, error) {
		if !stop() {
			r.broken = fmt.Errorf("%w: call abandoned: %w", errResidentBroken, ctx.Err())
			return -1, ctx.Err()
		}
		r.broken = fmt.Errorf("%w: %w", errResidentBroken, err)
		_ = r.close()
		return -1, r.broken
	}

	req := make([]byte, 0, 3*len(nonce)+len(call)+len(after)+3)
	req = append(req, nonce...)
	req = append(req, '\n')
	req = append(req, call...)
	req = append(req, nonce...)
	req = append(req, '\n')
	req = append(req, after...)
	req = append(req, nonce...)
	req = append(req, '\n')
	if _, err := r.in.Write(req); err != nil {
		// The shell runs a request only once its closing nonce line has
		// arrived, and nothing more can arrive now: the call did not run.
		code, ferr := fail(fmt.Errorf("send request: %w", err))
		if errors.Is(ferr, errResidentBroken) {
			ferr = fmt.Errorf("%w: %w", errNoResident, ferr)
		}
		return code, ferr
	}

	errDone := make(chan error, 1)
	go func() {
		rest, err := copyUntilTrailer(r.errs, stderr, nonce)
		if err == nil && rest != "" {
			err = fmt.Errorf("stderr trailer %q", rest)
		}
		errDone <- err
	}()
	rest, err := copyUntilTrailer(r.out, stdout, nonce)
	errErr := <-errDone
	if err != nil {
		return fail(fmt.Errorf("read stdout: %w", err))
	}
	if errErr != nil {
		return fail(fmt.Errorf("read stderr: %w", errErr))
	}
	code, perr := strconv.Atoi(strings.TrimPrefix(rest, " "))
	if perr != nil || !strings.HasPrefix(rest, " ") || code < 0 || code > 255 {
		return fail(fmt.Errorf("malformed trailer %q", rest))
	}
	if r.out.Buffered() > 0 || r.errs.Buffered() > 0 {
		// Something wrote after the trailer: a process the call left
		// behind holds the streams, and the next call's framing would not
		// hold.
		return fail(errors.New("output after the trailer"))
	}
	r.served++
	if !stop() {
		// ctx ended just after the call completed: the result stands,
		// the closed streams do not.
		r.broken = fmt.Errorf("%w: closed when the call's context ended", errResidentBroken)
	}
	return code, nil
}

// copyUntilTrailer copies br to w until the line break that precedes
// "NONCE" at the start of a line, and returns the rest of the trailer's
// line (after NONCE, without the final newline). The line break before
// NONCE belongs to the trailer, not to the output.
func copyUntilTrailer(br *bufio.Reader, w io.Writer, nonce string) (string, error) {
	var werr error
	write := func(b []byte) {
		if werr == nil && len(b) > 0 {
			_, werr = w.Write(b)
		}
	}
	for {
		chunk, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			write(chunk)
			continue
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
		// chunk ends with '\n': it may be the trailer's.
		write(chunk[:len(chunk)-1])
		next, err := br.Peek(len(nonce) + 1)
		if err != nil && len(next) < len(nonce)+1 {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
		if string(next[:len(nonce)]) == nonce && (next[len(nonce)] == ' ' || next[len(nonce)] == '\n') {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return "", fmt.Errorf("trailer: %w", err)
			}
			if werr != nil {
				return "", werr
			}
			return string(bytes.TrimSuffix(line[len(nonce):], []byte("\n"))), nil
		}
		write([]byte{'\n'})
	}
}

// residentPool shares residents among concurrent callers of one transport.
// The zero value is not usable: set New and Max.
type residentPool struct {
	// New starts a resident shell for lib. It should fail fast (not wait
	// for a connection or a session slot): the caller then runs the call
	// some other way.
	New func(ctx context.Context, lib string) (*resident, error)
	// Max bounds the residents alive at once.
	Max int
	// Wait is how long a call waits for a busy resident to come free
	// when Max are alive, before it gives up with errNoResident (and its
	// caller runs it through Exec); 0: not at all. See residentWait.
	Wait time.Duration

	mu        sync.Mutex
	freed     chan struct{} // closed (and replaced) when a resident comes free or goes
	idle      []*resident
	live      int
	gen       int // Reset increments it
	gens      map[*resident]int
	stillborn int // residents in a row that failed their first call
	disabled  bool
	closed    bool
}

// stillbornLimit is how many new residents in a row may fail their first
// call before the pool gives up on residents for good: a shell that cannot
// run the loop at all (an exotic /bin/sh) must not cost every call a try.
const stillbornLimit = 3

// errNoResident is returned by residentPool.Call when no resident is free
// and no more may be started now, and by resident.Call when the request
// could not be sent: nothing was run, and the caller may run the call some
// other way.
var errNoResident = errors.New("no resident shell free")

// Call runs call, then after, on an idle resident for lib, or on a new one while fewer
// than Max are alive. It returns an error matching errNoResident, having
// run nothing, when none is free, New failed or the pool gave up on
// residents; errors matching errResidentBroken mean the call's result is
// unknown.
func (p *residentPool) Call(ctx context.Context, lib, call, after string, stdout, stderr io.Writer) (int, error) {
	for {
		r, err := p.get(ctx, lib)
		if err != nil {
			return -1, err
		}
		code, err := r.Call(ctx, call, after, stdout, stderr)
		p.put(r, err, after != "")
		if errors.Is(err, errNoResident) && r.Served() > 0 && ctx.Err() == nil {
			// A resident that served before died while idle (its
			// connection went away): nothing was sent, so try the next
			// one, or a new one, rather than leave the call to Exec.
			continue
		}
		return code, err
	}
}

// residentWait is the Wait of an Env's pool. A call on a resident takes
// milliseconds, an Exec tens to hundreds of them (a docker exec on a
// loaded machine): a burst of calls — a restarted supervisor attaching a
// hundred processes at once — is served sooner queued on the residents
// than spilled into Execs, which would also load the sandbox's engine
// that the residents' calls go through. A resident stuck on a slow call
// delays a queued call by this much at most.
const residentWait = time.Second

func (p *residentPool) get(ctx context.Context, lib string) (*resident, error) {
	var timeout <-chan time.Time
	p.mu.Lock()
	for {
		if p.closed || p.disabled {
			p.mu.Unlock()
			return nil, errNoResident
		}
		for len(p.idle) > 0 {
			r := p.idle[len(p.idle)-1]
			p.idle = p.idle[:len(p.idle)-1]
			if r.Lib() == lib {
				p.mu.Unlock()
				return r, nil
			}
			p.dropLocked(r)
		}
		if p.live < p.Max {
			break
		}
		if p.Wait <= 0 {
			p.mu.Unlock()
			return nil, errNoResident
		}
		if p.freed == nil {
			p.freed = make(chan struct{})
		}
		freed := p.freed
		p.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(p.Wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-freed:
		case <-timeout:
			return nil, fmt.Errorf("%w: every resident stayed busy for %s", errNoResident, p.Wait)
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", errNoResident, ctx.Err())
		}
		p.mu.Lock()
	}
	p.live++
	gen := p.gen
	p.mu.Unlock()
	r, err := p.New(ctx, lib)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.live--
		return nil, fmt.Errorf("%w: %w", errNoResident, err)
	}
	if p.gens == nil {
		p.gens = map[*resident]int{}
	}
	p.gens[r] = gen
	return r, nil
}

// put returns r to the idle residents. One still busy with after-work
// goes to the bottom, so that the next call prefers another.
func (p *residentPool) put(r *resident, callErr error, busy bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.wakeLocked()
	if r.broken != nil {
		if callErr != nil && r.Served() == 0 && !errors.Is(callErr, context.Canceled) && !errors.Is(callErr, context.DeadlineExceeded) {
			p.stillborn++
			if p.stillborn >= stillbornLimit {
				p.disabled = true
			}
		}
		p.dropLocked(r)
		return
	}
	if r.Served() > 0 {
		p.stillborn = 0
	}
	if p.closed || p.gens[r] != p.gen {
		p.dropLocked(r)
		return
	}
	if busy {
		p.idle = append([]*resident{r}, p.idle...)
		return
	}
	p.idle = append(p.idle, r)
}

// dropLocked closes r and forgets it.
func (p *residentPool) dropLocked(r *resident) {
	_ = r.Close()
	delete(p.gens, r)
	p.live--
	p.wakeLocked()
}

// wakeLocked wakes the calls waiting for a resident.
func (p *residentPool) wakeLocked() {
	if p.freed != nil {
		close(p.freed)
		p.freed = nil
	}
}

// Disabled reports whether the pool gave up on residents after
// stillbornLimit new ones in a row failed their first call.
func (p *residentPool) Disabled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.disabled
}

// Reset closes the idle residents, and the busy ones when their call
// returns: the transport's connection was replaced.
func (p *residentPool) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gen++
	for _, r := range p.idle {
		p.dropLocked(r)
	}
	p.idle = nil
}

// Close closes every idle resident and refuses new calls; busy ones are
// closed when their call returns.
func (p *residentPool) Close() {
	p.mu.Lock()
	p.closed = true
	p.wakeLocked()
	p.mu.Unlock()
	p.Reset()
}
