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
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/env"
)

// A follow is one long-lived transport call (corral_follow in sh/poll.sh)
// that streams a running process's output as it is written and reports its
// exit when it happens: frames "D N" + N log bytes, "E STATE", or "T" when
// the follow gave up after FollowIdle without output. Output and Wait use
// one while a long-poll slot is free (a follow holds one, as a long poll
// does: on ssh each is a session); otherwise they poll.

// errFollowIdle ends a follow that ran out of its idle budget ("T"): the
// process still runs and nothing is lost; the caller opens another.
var errFollowIdle = errors.New("follow: idle budget used up")

// errNoDataFollow is the "X" frame: the sandbox's dd cannot count in bytes,
// which a follow needs to send a frame's bytes safely; its readers poll.
var errNoDataFollow = errors.New("follow: dd cannot count in bytes here (iflag=count_bytes); polling instead")

// followStream reads the frames of one corral_follow call.
type followStream struct {
	br     *bufio.Reader
	pr     *io.PipeReader
	cancel context.CancelFunc
	done   chan struct{}
	left   int64       // bytes of the current D frame still to read
	ended  atomic.Bool // an E, T or X frame was read: the script ends by itself
}

// follow starts corral_follow for p from offset off (data: stream the log
// too, else only the exit) if a long-poll slot is free; nil when none is,
// or follows are off (LongPoll < 0). idle is how long the process has been
// quiet already: it paces the follow's looks.
func (p *process) follow(ctx context.Context, off int64, data bool, idle time.Duration) *followStream {
	release, ok := p.e.longPollSlot()
	if !ok {
		return nil
	}
	// Counted under the lock Close takes to mark the Env closed, so that
	// Close, which waits for the follows, never misses one.
	p.e.mu.Lock()
	if p.e.closed {
		p.e.mu.Unlock()
		release()
		return nil
	}
	p.e.follows.Add(1)
	p.e.mu.Unlock()
	flag := "0"
	if data {
		flag = "1"
	}
	ctx, cancel := context.WithCancel(ctx)
	stopLife := context.AfterFunc(p.e.life, cancel)
	pr, pw := io.Pipe()
	f := &followStream{
		br: bufio.NewReaderSize(pr, 64<<10), pr: pr, cancel: cancel, done: make(chan struct{})}
	r := p.ref
	id := newHex(8)
	head, tail := env.LogKeep(p.e.opts.LogMax)
	line := call("corral_follow", r.Dir, itoa(int(r.WPID)), itoa(int(r.WStart)), itoa(int(r.PID)), itoa(int(r.Start)),
		strconv.FormatInt(off, 10), flag, strconv.FormatInt(p.e.opts.FollowIdle.Milliseconds(), 10), id,
		strconv.FormatInt(idle.Milliseconds(), 10), strconv.FormatInt(head, 10), strconv.FormatInt(tail, 10))
	// A reader closed from another goroutine cancels ctx: the pipe must
	// close too, or the transport's copy into it blocks forever.
	stopClosing := context.AfterFunc(ctx, func() { pr.Close() })
	go func() {
		defer p.e.follows.Done()
		defer close(f.done)
		defer stopLife()
		defer stopClosing()
		defer release()
		if ct, ok := p.e.t.(CallTracker); ok {
			defer ct.TrackCall()()
		}
		var errb bytes.Buffer
		code, err := p.e.t.Exec(ctx, lib+line, nil, pw, &errb)
		if err != nil && !f.ended.Load() {
			p.unfollow(id)
		}
		switch {
		case err != nil:
			err = fmt.Errorf("%s: follow: %w", p.name(), err)
		case code != 0:
			err = fmt.Errorf("%s: follow: script exit status %d: %s", p.name(), code, strings.TrimSpace(errb.String()))
		default:
			err = io.ErrUnexpectedEOF // the frames end with E, T or X, never with the stream
		}
		pw.CloseWithError(err)
	}()
	return f
}

// unfollow ends the script of follow id inside the sandbox: its call was
// cut (the reader closed, the Env closed, the transport broke) before the
// script ended by itself, and a transport may leave it running (see
// corral_unfollow). Best effort: a script left over ends after FollowIdle
// or with the process, unless it is blocked writing.
func (p *process) unfollow(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.e.call(ctx, "unfollow", call("corral_unfollow", p.ref.Dir, id), false); err != nil {
		p.e.opts.Logger.Debug("nohup: could not end a follow left running", "env", p.e.opts.Name, "pid", p.ref.PID, "err", err)
	}
}

// close ends the follow and waits until its call has returned, so that the
// slot is free again and nothing writes to the pipe any more.
func (f *followStream) close() {
	f.cancel()
	f.pr.Close()
	<-f.done
}

// frame reads the next frame header. For "D" it returns with f.left set;
// for "E" the state; for "T" errFollowIdle.
func (f *followStream) frame() (state string, err error) {
	line, err := f.br.ReadString('\n')
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return "", err
	}
	line = strings.TrimSuffix(line, "\n")
	switch {
	case line == "T":
		f.ended.Store(true)
		return "", errFollowIdle
	case line == "X":
		f.ended.Store(true)
		return "", errNoDataFollow
	case strings.HasPrefix(line, "E "):
		f.ended.Store(true)
		return line[2:], nil
	case strings.HasPrefix(line, "D "):
		n, err := strconv.ParseInt(line[2:], 10, 64)
		if err == nil && n > 0 {
			f.left = n
			return "", nil
		}
	}
	return "", fmt.Errorf("follow: malformed frame %q", trunc([]byte(line)))
}

// read reads log bytes of the current D frame into b.
func (f *followStream) read(b []byte) (int, error) {
	if int64(len(b)) > f.left {
		b = b[:f.left]
	}
	n, err := f.br.Read(b)
	f.left -= int64(n)
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// waitFollow waits for the exit on follows while slots are free: it returns
// the final state line, or ok false when no slot was free or a follow
// broke (the caller then polls, which also resyncs after a reconnect).
func (p *process) waitFollow(ctx context.Context) (state string, ok bool, err error) {
	began := time.Now()
	for {
		f := p.follow(ctx, 0, false, time.Since(began))
		if f == nil {
			return "", false, nil
		}
		st, ferr := f.frame()
		f.close()
		switch {
		case ferr == nil:
			return st, true, nil
		case ctx.Err() != nil:
			return "", false, ctx.Err()
		case errors.Is(ferr, errFollowIdle):
			continue
		}
		p.e.opts.Logger.Debug("nohup: follow broke; polling", "env", p.e.opts.Name, "pid", p.ref.PID, "err", ferr)
		return "", false, nil
	}
}

// followRetry is how long a reader waits before it tries a follow again
// after one broke, polling meanwhile.
const followRetry = time.Second
