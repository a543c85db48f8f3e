package nohup

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Attach reads the process's state, one round trip. A supervisor that
// restarts attaches every process it recorded at once (a hundred, in one
// container), and a round trip each, even on a resident shell, queues
// behind the few residents, or spills into an Exec each (see
// residentWait). So concurrent Attach calls share their round trips: the
// first caller leads, reading the state of its process alone; the calls
// that arrive meanwhile queue, and the leader then reads all of theirs in
// one call of corral_states (sh/poll.sh), and so on until none is left. A
// burst of N attaches costs about two round trips, and a lone Attach the
// same one as before.

// maxStateBatch bounds the processes one corral_states call reads: the
// request is a line of about 150 bytes each, which a resident shell reads
// a byte per system call.
const maxStateBatch = 128

// stateBatchTimeout bounds one corral_states call, which the leader makes
// for others too, so not under its caller's context alone.
const stateBatchTimeout = time.Minute

// stateReq is one Attach's read of its process's state.
type stateReq struct {
	ref  refData
	done chan struct{}
	st   string
	err  error
}

// stateBatcher queues the state reads of concurrent Attach calls.
type stateBatcher struct {
	mu      sync.Mutex
	leading bool
	queue   []*stateReq
}

// attachState returns the state of r's process (see state), sharing the
// round trip with concurrent callers.
func (e *Env) attachState(ctx context.Context, r refData) (string, error) {
	req := &stateReq{ref: r, done: make(chan struct{})}
	b := &e.states
	b.mu.Lock()
	b.queue = append(b.queue, req)
	if !b.leading {
		b.leading = true
		for {
			batch := b.queue[:min(len(b.queue), maxStateBatch)]
			b.queue = b.queue[len(batch):]
			b.mu.Unlock()
			e.readStates(batch)
			b.mu.Lock()
			if len(b.queue) == 0 {
				b.leading = false
				break
			}
		}
	}
	b.mu.Unlock()
	select {
	case <-req.done:
		return req.st, req.err
	case <-ctx.Done():
		// The leader still fills the request in; nobody reads it.
		return "", ctx.Err()
	}
}

// readStates reads the states of batch's processes in one call and
// completes their requests.
func (e *Env) readStates(batch []*stateReq) {
	ctx, cancel := context.WithTimeout(e.life, stateBatchTimeout)
	defer cancel()
	var (
		out []byte
		err error
	)
	if len(batch) == 1 {
		r := batch[0].ref
		out, err = e.call(ctx, "status", call("corral_wait", r.Dir, itoa(int(r.WPID)), itoa(int(r.WStart)), itoa(int(r.PID)), itoa(int(r.Start)), ""), true)
	} else {
		args := make([]string, 0, 5*len(batch))
		for _, q := range batch {
			r := q.ref
			args = append(args, r.Dir, itoa(int(r.WPID)), itoa(int(r.WStart)), itoa(int(r.PID)), itoa(int(r.Start)))
		}
		out, err = e.call(ctx, fmt.Sprintf("status of %d processes", len(batch)), call("corral_states", args...), true)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if err == nil && len(lines) != len(batch) {
		err = fmt.Errorf("nohup %s: status of %d processes: %d lines in the answer: %q", e.opts.Name, len(batch), len(lines), trunc(out))
	}
	for i, q := range batch {
		if err != nil {
			q.err = err
		} else {
			q.st = strings.TrimSpace(lines[i])
		}
		close(q.done)
	}
}
