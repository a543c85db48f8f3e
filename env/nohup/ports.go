package nohup

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/env"
)

// Ports. The shell (sh/ports.sh) only gathers: the LISTEN rows of the
// namespace's /proc/net/tcp and tcp6, raw, and which process holds which
// socket inode (stat -L on /proc/PID/fd/*); this file decodes them. A
// process's listeners are the rows whose socket a process of its tree
// (tree in sh/state.sh: group and tag, as Signal's) holds, read in the
// tree's network namespace. WaitListening waits inside the sandbox (one
// call that looks every 10 ms, see corral_waitport), so that a readiness
// check on docker costs no round trip per look.

var (
	_ env.PortLister     = (*Env)(nil)
	_ env.TreePortLister = (*Env)(nil)
	_ env.URLChecker     = (*Env)(nil)
	_ env.PortLister     = (*process)(nil)
	_ env.PortWaiter     = (*process)(nil)
)

// listenReport is what l_report prints, decoded.
type listenReport struct {
	rows     []listenRow
	holders  map[uint64]int // socket inode → a PID holding it
	commands map[int]string
}

type listenRow struct {
	port  int
	addr  string
	inode uint64
}

// parseListenReport decodes l_report's lines (see sh/ports.sh). Lines it
// does not know are an error: the report comes from the engine's own
// script.
func parseListenReport(out []byte) (listenReport, error) {
	rep := listenReport{holders: map[uint64]int{}, commands: map[int]string{}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		kind, rest, _ := strings.Cut(line, " ")
		switch kind {
		case "R":
			row, err := parseTCPRow(rest)
			if err != nil {
				return rep, err
			}
			rep.rows = append(rep.rows, row)
		case "H":
			f := strings.Fields(rest)
			if len(f) != 2 {
				return rep, fmt.Errorf("malformed holder line %q", trunc([]byte(line)))
			}
			pid, err1 := strconv.Atoi(f[0])
			ino, err2 := strconv.ParseUint(f[1], 10, 64)
			if err1 != nil || err2 != nil || pid <= 0 {
				return rep, fmt.Errorf("malformed holder line %q", trunc([]byte(line)))
			}
			if _, ok := rep.holders[ino]; !ok {
				rep.holders[ino] = pid
			}
		case "C":
			p, cmd, _ := strings.Cut(rest, " ")
			pid, err := strconv.Atoi(p)
			if err != nil || pid <= 0 {
				return rep, fmt.Errorf("malformed command line %q", trunc([]byte(line)))
			}
			rep.commands[pid] = strings.TrimSpace(cmd)
		case "":
		default:
			return rep, fmt.Errorf("unexpected line %q", trunc([]byte(line)))
		}
	}
	if err := sc.Err(); err != nil {
		return rep, err
	}
	return rep, nil
}

// parseTCPRow decodes one row of /proc/net/tcp or tcp6 in the LISTEN state:
// "sl: LOCAL REMOTE st ... uid timeout inode ...". LOCAL is the address in
// hex, as the kernel holds it in memory (each 32-bit word in host order,
// little-endian on every Linux corral runs on), a colon and the port in
// hex.
func parseTCPRow(row string) (listenRow, error) {
	f := strings.Fields(row)
	if len(f) < 10 || f[3] != "0A" {
		return listenRow{}, fmt.Errorf("malformed /proc/net/tcp row %q", trunc([]byte(row)))
	}
	a, p, ok := strings.Cut(f[1], ":")
	port, err := strconv.ParseUint(p, 16, 16)
	if !ok || err != nil || port == 0 {
		return listenRow{}, fmt.Errorf("malformed local address in /proc/net/tcp row %q", trunc([]byte(row)))
	}
	addr, err := decodeProcAddr(a)
	if err != nil {
		return listenRow{}, fmt.Errorf("/proc/net/tcp row %q: %w", trunc([]byte(row)), err)
	}
	ino, err := strconv.ParseUint(f[9], 10, 64)
	if err != nil {
		return listenRow{}, fmt.Errorf("malformed inode in /proc/net/tcp row %q", trunc([]byte(row)))
	}
	return listenRow{port: int(port), addr: addr, inode: ino}, nil
}

// decodeProcAddr decodes the 8 or 32 hex digits of an address in
// /proc/net/tcp(6): 32-bit words, each little-endian.
func decodeProcAddr(h string) (string, error) {
	b, err := hex.DecodeString(h)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return "", fmt.Errorf("address %q is not 8 or 32 hex digits", h)
	}
	for i := 0; i < len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	// A v4-mapped address on an IPv6 socket stays IPv6 (::ffff:127.0.0.1):
	// that is what the socket listens on.
	a, _ := netip.AddrFromSlice(b)
	return a.String(), nil
}

// listeners turns a report into the sorted, deduplicated Listener list:
// every row when all, else only the rows whose socket a holder of the
// report holds (the report's holders are then the tree's processes).
func (rep listenReport) listeners(all bool) []env.Listener {
	var ls []env.Listener
	for _, r := range rep.rows {
		pid, held := rep.holders[r.inode]
		if !held && !all {
			continue
		}
		ls = append(ls, env.Listener{Port: r.port, Addr: r.addr, PID: pid, Command: rep.commands[pid]})
	}
	slices.SortStableFunc(ls, func(a, b env.Listener) int {
		return cmp.Or(cmp.Compare(a.Port, b.Port), cmp.Compare(a.Addr, b.Addr), cmp.Compare(b.PID, a.PID))
	})
	// A held row before an unheld one of the same port and address (the
	// PID order above): a socket shared by SO_REUSEPORT listeners, some in
	// unreadable processes, keeps the holder that is known.
	return slices.CompactFunc(ls, func(a, b env.Listener) bool { return a.Port == b.Port && a.Addr == b.Addr })
}

// Listeners implements env.PortLister: the LISTEN sockets of the tree, read
// in its network namespace. A tree with no live process has none.
func (p *process) Listeners(ctx context.Context) ([]env.Listener, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	out, err := p.e.call(ctx, "listeners", call("corral_listeners", itoa(int(p.ref.PID)), itoa(int(p.ref.Start)), p.ref.Tag), true)
	if err != nil {
		return nil, err
	}
	rep, err := parseListenReport(out)
	if err != nil {
		return nil, fmt.Errorf("%s: listeners: %w", p.name(), err)
	}
	return rep.listeners(false), nil
}

// Listeners implements env.PortLister: every LISTEN socket of the network
// namespace the sandbox's shells run in, with the holder where the sandbox
// user can read its descriptors (PID 0 otherwise).
func (e *Env) Listeners(ctx context.Context) ([]env.Listener, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	out, err := e.call(ctx, "listeners", call("corral_listeners_all"), true)
	if err != nil {
		return nil, err
	}
	rep, err := parseListenReport(out)
	if err != nil {
		return nil, fmt.Errorf("nohup %s: listeners: %w", e.opts.Name, err)
	}
	return rep.listeners(true), nil
}

// TreeListeners implements env.TreePortLister: one call
// (corral_treelisteners in sh/ports.sh) finds the listeners of every
// process of procs that is this Env's, each read as its Listeners would,
// without commands. Handles of another Env, or released, get nil.
func (e *Env) TreeListeners(ctx context.Context, procs []env.Process) ([][]env.Listener, error) {
	return perTree(ctx, e, procs, "tree listeners", "corral_treelisteners", treeWords, parseTreeReport)
}

// treeWords are a tree's arguments to a call about many trees: PID START
// TAG, as corral_treelisteners and corral_treestats take them.
func treeWords(p *process) []string {
	return []string{itoa(int(p.ref.PID)), itoa(int(p.ref.Start)), p.ref.Tag}
}

// perTree makes one call of fn about the trees of the processes of procs
// that are this Env's and not released, each given by words, decodes its
// report with parse (one T per tree of the call, in order) and returns
// one T per process of procs: the zero T for the others. No call is made
// when none is this Env's.
func perTree[T any](ctx context.Context, e *Env, procs []env.Process, what, fn string, words func(*process) []string, parse func([]byte, int) ([]T, error)) ([]T, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	out := make([]T, len(procs))
	var args []string
	var index []int // the position in procs of each tree of the call
	for i, h := range procs {
		p, ok := h.(*process)
		if !ok || p.e != e || p.check() != nil {
			continue
		}
		args = append(args, words(p)...)
		index = append(index, i)
	}
	if len(index) == 0 {
		return out, nil
	}
	rep, err := e.call(ctx, what, call(fn, args...), true)
	if err != nil {
		return nil, err
	}
	trees, err := parse(rep, len(index))
	if err != nil {
		return nil, fmt.Errorf("nohup %s: %s: %w", e.opts.Name, what, err)
	}
	for k, v := range trees {
		out[index[k]] = v
	}
	return out, nil
}

// parseTreeReport decodes corral_treelisteners's lines into each of the n
// trees' listeners (see sh/ports.sh): a LISTEN row of a tree's namespace
// is the tree's when a process of the tree holds its socket.
func parseTreeReport(out []byte, n int) ([][]env.Listener, error) {
	members := make([]map[int]bool, n)
	ns := make([]string, n)
	rows := map[string][]listenRow{}
	holders := map[uint64][]int{}
	tree := func(field string) (int, error) {
		i, err := strconv.Atoi(field)
		if err != nil || i < 0 || i >= n {
			return 0, fmt.Errorf("tree index %q out of range", field)
		}
		return i, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		kind, rest, _ := strings.Cut(line, " ")
		bad := func(err error) ([][]env.Listener, error) {
			return nil, fmt.Errorf("line %q: %w", trunc([]byte(line)), err)
		}
		switch kind {
		case "M", "N":
			f := strings.Fields(rest)
			if len(f) != 2 {
				return bad(errors.New("want two fields"))
			}
			i, err := tree(f[0])
			if err != nil {
				return bad(err)
			}
			if kind == "N" {
				ns[i] = f[1]
				continue
			}
			pid, err := strconv.Atoi(f[1])
			if err != nil || pid <= 0 {
				return bad(errors.New("malformed PID"))
			}
			if members[i] == nil {
				members[i] = map[int]bool{}
			}
			members[i][pid] = true
		case "R":
			key, row, _ := strings.Cut(rest, " ")
			r, err := parseTCPRow(row)
			if err != nil {
				return bad(err)
			}
			rows[key] = append(rows[key], r)
		case "H":
			f := strings.Fields(rest)
			if len(f) != 2 {
				return bad(errors.New("want two fields"))
			}
			pid, err1 := strconv.Atoi(f[0])
			ino, err2 := strconv.ParseUint(f[1], 10, 64)
			if err1 != nil || err2 != nil || pid <= 0 {
				return bad(errors.New("malformed holder"))
			}
			holders[ino] = append(holders[ino], pid)
		case "":
		default:
			return bad(errors.New("unknown line"))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	res := make([][]env.Listener, n)
	for i := range n {
		if members[i] == nil || ns[i] == "" {
			continue
		}
		rep := listenReport{holders: map[uint64]int{}}
		for _, r := range rows[ns[i]] {
			// The lowest PID of the tree that holds it: one of them, the
			// same at every look.
			held := 0
			for _, pid := range holders[r.inode] {
				if members[i][pid] && (held == 0 || pid < held) {
					held = pid
				}
			}
			if held != 0 {
				rep.rows = append(rep.rows, r)
				rep.holders[r.inode] = held
			}
		}
		res[i] = rep.listeners(false)
	}
	return res, nil
}

// WaitListening implements env.PortWaiter. While a long-poll slot is free
// (see Options.MaxLongPolls) it waits inside the sandbox, in one call that
// looks every 10 ms (corral_waitport in sh/ports.sh) and ends after
// Options.FollowIdle, when the next one opens; without a slot, or when
// long polls are off, it calls Listeners paced by Options.Poll. A port
// held by a process outside the tree does not count.
func (p *process) WaitListening(ctx context.Context, ports []int) ([]env.Listener, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	if len(ports) == 0 {
		return nil, fmt.Errorf("%s: wait listening: no ports given", p.name())
	}
	hexPorts := make([]string, len(ports))
	for i, port := range ports {
		if err := env.ValidatePort(port); err != nil {
			return nil, fmt.Errorf("%s: wait listening: %w", p.name(), err)
		}
		hexPorts[i] = fmt.Sprintf("%04X", port)
	}
	began := time.Now()
	first := true
	b := newBackoff(p.e.opts.Poll)
	var retryAt time.Time
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := p.check(); err != nil {
			return nil, err
		}
		if !time.Now().Before(retryAt) {
			ls, state, err := p.waitPort(ctx, strings.Join(hexPorts, " "), time.Since(began), first)
			first = false
			switch {
			case ctx.Err() != nil:
				return nil, ctx.Err()
			case err != nil:
				p.e.opts.Logger.Debug("nohup: port wait broke; polling", "env", p.e.opts.Name, "pid", p.ref.PID, "err", err)
				retryAt = time.Now().Add(followRetry)
			case state == waitFound && listensOn(ls, ports):
				return ls, nil
			case state == waitFound, state == waitIdle:
				// Found, but gone again by the time of the report; or the
				// budget ran out: wait again.
				continue
			}
		}
		ls, err := p.Listeners(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("wait listening: %w", err)
		}
		if listensOn(ls, ports) {
			return ls, nil
		}
		if err := p.pause(ctx, b, nil); err != nil {
			return nil, err
		}
	}
}

// listensOn reports whether ls holds one of ports.
func listensOn(ls []env.Listener, ports []int) bool {
	for _, l := range ls {
		if slices.Contains(ports, l.Port) {
			return true
		}
	}
	return false
}

type waitState int

const (
	waitNoSlot waitState = iota // no long-poll slot free: poll instead
	waitFound                   // the tree listens on a wanted port
	waitIdle                    // the budget ran out
)

// quickWaitBudget bounds the first port wait of a process, which runs on a
// resident shell when one is free: a wait begins right after the start,
// when a new exec would still be being set up (on docker, behind the
// start's own follows: 300-400 ms) while a quick server already listens. A
// resident holds no more than this; the waits after it are execs of their
// own.
const quickWaitBudget = 2 * time.Second

// waitPort runs one corral_waitport if a long-poll slot is free: the first
// (quick) on a resident shell if one is free, for at most quickWaitBudget,
// the others through Exec. A call cut before it ended (ctx done, the Env
// closed, the transport broke) is ended inside the sandbox as a follow is
// (corral_unfollow), in the background: the caller returns at once.
func (p *process) waitPort(ctx context.Context, ports string, waited time.Duration, quick bool) ([]env.Listener, waitState, error) {
	release, ok := p.e.longPollSlot()
	if !ok {
		return nil, waitNoSlot, nil
	}
	defer release()
	p.e.mu.Lock()
	if p.e.closed {
		p.e.mu.Unlock()
		return nil, waitNoSlot, fmt.Errorf("nohup %s: %w", p.e.opts.Name, env.ErrReleased)
	}
	p.e.follows.Add(1)
	p.e.mu.Unlock()
	defer p.e.follows.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(p.e.life, cancel)()
	if ct, ok := p.e.t.(CallTracker); ok {
		defer ct.TrackCall()()
	}
	r := p.ref
	id := newHex(8)
	budget := p.e.opts.FollowIdle
	if quick && p.e.residents != nil {
		budget = min(budget, quickWaitBudget)
	}
	line := call("corral_waitport", r.Dir, itoa(int(r.PID)), itoa(int(r.Start)), r.Tag, ports,
		strconv.FormatInt(budget.Milliseconds(), 10), id, strconv.FormatInt(waited.Milliseconds(), 10))
	var out, errb bytes.Buffer
	code, err := -1, errNoResident
	if quick && p.e.residents != nil {
		code, err = p.e.residents.Call(ctx, lib, line, "", &out, &errb)
	}
	if errors.Is(err, errNoResident) {
		out.Reset()
		errb.Reset()
		code, err = p.e.t.Exec(ctx, lib+line, nil, &out, &errb)
	}
	first, rest, _ := bytes.Cut(out.Bytes(), []byte("\n"))
	ended := err == nil && code == 0 && (string(first) == "F" || string(first) == "T")
	if !ended {
		p.e.follows.Add(1)
		go func() {
			defer p.e.follows.Done()
			p.unfollow(id)
		}()
	}
	switch {
	case err != nil:
		return nil, waitNoSlot, fmt.Errorf("%s: wait listening: %w", p.name(), err)
	case code != 0:
		return nil, waitNoSlot, fmt.Errorf("%s: wait listening: script exit status %d: %s", p.name(), code, strings.TrimSpace(errb.String()))
	case string(first) == "T":
		return nil, waitIdle, nil
	case string(first) != "F":
		return nil, waitNoSlot, fmt.Errorf("%s: wait listening: unexpected reply %q", p.name(), trunc(out.Bytes()))
	}
	rep, err := parseListenReport(rest)
	if err != nil {
		return nil, waitNoSlot, fmt.Errorf("%s: wait listening: %w", p.name(), err)
	}
	return rep.listeners(false), waitFound, nil
}

// checkURLTimeout bounds one CheckURL inside the sandbox (less when ctx
// ends sooner): a readiness check that hangs longer says "not ready" as
// well as a refusal does.
const checkURLTimeout = 3 * time.Second

// statusLine finds an HTTP status line in a client's output.
var statusLine = regexp.MustCompile(`HTTP/[0-9.]+ ([0-9]{3})\b`)

// urlCheckState is what the sandbox was found to hold for CheckURL.
type urlCheckState struct {
	missing atomic.Bool // a check found no HTTP client
}

// CheckURL implements env.URLChecker with the first of curl, GNU wget,
// busybox wget and python3 that the sandbox has (corral_checkurl in
// sh/ports.sh), looked up at every call, so that a client installed later
// is used. Redirects are not followed (busybox wget follows them, and the
// status of its first answer is returned); certificates are not checked.
func (e *Env) CheckURL(ctx context.Context, rawURL string) (int, error) {
	if err := e.checkOpen(); err != nil {
		return 0, err
	}
	if err := env.ValidateCheckURL(rawURL); err != nil {
		return 0, err
	}
	timeout := checkURLTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	secs := max(1, int(timeout/time.Second))
	out, err := e.call(ctx, "check url", call("corral_checkurl", rawURL, strconv.Itoa(secs)), false)
	if err != nil {
		return 0, err
	}
	tool, said, _ := strings.Cut(string(out), "\n")
	said = strings.TrimSpace(said)
	fail := func(why string) (int, error) {
		return 0, fmt.Errorf("nohup %s: check %s with %s: %s", e.opts.Name, rawURL, tool, why)
	}
	switch tool {
	case wordNone:
		e.urlCheck.missing.Store(true)
		return 0, fmt.Errorf("nohup %s: check %s: the sandbox has no HTTP client; install curl, wget or python3 in it: %w", e.opts.Name, rawURL, env.ErrUnsupported)
	case "curl":
		e.urlCheck.missing.Store(false)
		code, msg, _ := strings.Cut(said, "\n")
		if n, err := strconv.Atoi(strings.TrimSpace(code)); err == nil && n >= 100 && n <= 599 {
			return n, nil
		}
		if msg == "" {
			msg = said
		}
		return fail(lastLine(msg))
	case "wget", "busybox-wget", "python3":
		e.urlCheck.missing.Store(false)
		if m := statusLine.FindStringSubmatch(said); m != nil {
			n, _ := strconv.Atoi(m[1])
			return n, nil
		}
		return fail(lastLine(said))
	}
	return 0, fmt.Errorf("nohup %s: check %s: unexpected reply %q", e.opts.Name, rawURL, trunc(out))
}

// lastLine returns the last non-empty line of s (a client's error), or
// "no answer".
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
		return l
	}
	return "no answer"
}
