package local

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// shimName is the name of one of the shim server's files in the state
// directory; the protocol version is part of it.
func shimName(suffix string) string {
	return "shim-v" + strconv.Itoa(shimProtocol) + suffix
}

// sunPathMax is the room for a socket path in sockaddr_un, including the
// terminating NUL.
const sunPathMax = 108

// shimAddr is where the server of stateDir listens: a socket file in the
// state directory, or, where that path is too long for sockaddr_un, an
// abstract socket named after the user and a hash of the directory. Anyone
// on the machine can bind an abstract name, so both sides check the
// other's uid (SO_PEERCRED) whichever kind is used.
func shimAddr(stateDir string) *net.UnixAddr {
	path := filepath.Join(stateDir, shimName(".sock"))
	if len(path) < sunPathMax {
		return &net.UnixAddr{Name: path, Net: "unix"}
	}
	sum := sha256.Sum256([]byte(stateDir))
	return &net.UnixAddr{Name: fmt.Sprintf("@corral-%s-%d-%s", shimName(""), os.Getuid(), hex.EncodeToString(sum[:16])), Net: "unix"}
}

// peerCred returns the uid and pid of the process at the other end.
func peerCred(c *net.UnixConn) (uid, pid int, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := rc.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, 0, err
	}
	if credErr != nil {
		return -1, 0, credErr
	}
	return int(cred.Uid), int(cred.Pid), nil
}

// shimClient is an Env's way to its state directory's shim server: a pool
// of open connections, each carrying one request at a time. Holding them
// keeps the server from leaving while the Env lives; Close lets go.
type shimClient struct {
	stateDir string

	mu     sync.Mutex
	idle   []*shimConn
	closed bool
}

// shimConn is one connection to a server.
type shimConn struct {
	c     *net.UnixConn
	r     *bufio.Reader
	hello shimHello
}

func (c *shimClient) close() {
	c.mu.Lock()
	idle := c.idle
	c.idle, c.closed = nil, true
	c.mu.Unlock()
	for _, sc := range idle {
		_ = sc.c.Close()
	}
}

// request sends req and returns the reply. A connection from the pool
// that turns out dead before the server read the request is replaced
// once; a server that dies after reading a request is reported, never
// asked again (a start might have happened).
func (c *shimClient) request(ctx context.Context, req *shimRequest, spawn bool) (*shimReply, shimHello, error) {
	for attempt := 0; ; attempt++ {
		sc, pooled, err := c.get(ctx, spawn)
		if err != nil {
			return nil, shimHello{}, err
		}
		data, err := json.Marshal(req)
		if err != nil {
			c.put(sc)
			return nil, shimHello{}, err
		}
		_ = sc.c.SetDeadline(time.Now().Add(shimRequestTimeout))
		if _, err := sc.c.Write(append(data, '\n')); err != nil {
			_ = sc.c.Close()
			if pooled && attempt == 0 {
				continue
			}
			return nil, sc.hello, fmt.Errorf("send to shim server %d: %w", sc.hello.PID, err)
		}
		var rep shimReply
		line, err := sc.r.ReadBytes('\n')
		if err == nil {
			err = json.Unmarshal(line, &rep)
		}
		if err != nil {
			_ = sc.c.Close()
			if pooled && attempt == 0 && errors.Is(err, syscall.ECONNRESET) {
				// A unix socket resets its peer only when it is closed
				// with data unread: the server never read this request,
				// so asking again cannot start anything twice. It happens
				// when a killed server is still tearing down: its main
				// thread is a zombie (the supervisor counts it gone) while
				// another thread holds its descriptors a moment longer,
				// so the pooled connection still looked open.
				continue
			}
			return nil, sc.hello, fmt.Errorf("shim server %d did not answer: %w", sc.hello.PID, err)
		}
		_ = sc.c.SetDeadline(time.Time{})
		c.put(sc)
		return &rep, sc.hello, nil
	}
}

// shimRequestTimeout bounds one request. A start forks and writes two
// small files: far less, even on a loaded machine. Requests are not cut
// short by the caller's context, so a started process is never left
// without its supervisor knowing.
const shimRequestTimeout = 30 * time.Second

func (c *shimClient) put(sc *shimConn) {
	c.mu.Lock()
	if !c.closed {
		c.idle = append(c.idle, sc)
		sc = nil
	}
	c.mu.Unlock()
	if sc != nil {
		_ = sc.c.Close()
	}
}

// get returns an idle connection that is still open, or a new one; with
// spawn, a server is started when none answers.
func (c *shimClient) get(ctx context.Context, spawn bool) (sc *shimConn, pooled bool, err error) {
	c.mu.Lock()
	for len(c.idle) > 0 {
		sc = c.idle[len(c.idle)-1]
		c.idle = c.idle[:len(c.idle)-1]
		if connOpen(sc.c) {
			c.mu.Unlock()
			return sc, true, nil
		}
		_ = sc.c.Close()
	}
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, false, errors.New("environment closed")
	}
	sc, err = c.dial(ctx, spawn)
	return sc, false, err
}

// connOpen peeks at an idle connection: a server that left has closed it
// (EOF), a live one has nothing to say (EAGAIN).
func connOpen(c *net.UnixConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	_ = rc.Control(func(fd uintptr) {
		var b [1]byte
		_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		open = errors.Is(err, unix.EAGAIN)
	})
	return open
}

// dial connects to the server, starting one first when none answers and
// spawn is set.
func (c *shimClient) dial(ctx context.Context, spawn bool) (*shimConn, error) {
	addr := shimAddr(c.stateDir)
	sc, err := dialShim(addr)
	if err == nil || !spawn {
		return sc, err
	}
	// Supervisors start servers one at a time: whoever holds the start
	// lock looks again, and starts one only if still none answers.
	lf, err := os.OpenFile(filepath.Join(c.stateDir, shimName(".start")), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open shim start lock: %w", err)
	}
	defer lf.Close()
	if err := flockRetry(int(lf.Fd()), unix.LOCK_EX); err != nil {
		return nil, fmt.Errorf("take shim start lock: %w", err)
	}
	if sc, err := dialShim(addr); err == nil {
		return sc, nil
	}
	if err := c.spawn(ctx); err != nil {
		return nil, err
	}
	sc, err = dialShim(addr)
	if err != nil {
		return nil, fmt.Errorf("connect to the shim server just started: %w", err)
	}
	return sc, nil
}

// dialShim connects and reads the server's greeting.
func dialShim(addr *net.UnixAddr) (*shimConn, error) {
	c, err := net.DialUnix("unix", nil, addr)
	if err != nil {
		return nil, err
	}
	sc, err := greet(c)
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("shim server at %s: %w", addr.Name, err)
	}
	return sc, nil
}

func greet(c *net.UnixConn) (*shimConn, error) {
	uid, pid, err := peerCred(c)
	if err != nil {
		return nil, fmt.Errorf("peer credentials: %w", err)
	}
	if uid != os.Getuid() {
		return nil, fmt.Errorf("the socket belongs to uid %d, not to us", uid)
	}
	_ = c.SetReadDeadline(time.Now().Add(shimRequestTimeout))
	r := bufio.NewReader(c)
	line, err := r.ReadBytes('\n')
	if err != nil {
		// A server that was exiting when we connected closes at once.
		return nil, fmt.Errorf("no greeting: %w", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	var h shimHello
	if err := json.Unmarshal(line, &h); err != nil {
		return nil, fmt.Errorf("malformed greeting: %w", err)
	}
	if h.Version != shimProtocol {
		return nil, fmt.Errorf("server speaks protocol %d, we speak %d", h.Version, shimProtocol)
	}
	if h.PID != pid {
		return nil, fmt.Errorf("greeting names pid %d, the socket's peer is %d", h.PID, pid)
	}
	return &shimConn{c: c, r: r, hello: h}, nil
}

// spawn starts a shim server for the state directory. It double-starts
// (the first stage leaves at once) so the server is re-parented away from
// the supervisor, in a session of its own; it reports readiness once it
// listens.
func (c *shimClient) spawn(ctx context.Context) error {
	exe, err := shimExecutable()
	if err != nil {
		return fmt.Errorf("find own executable for the shim server: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(c.stateDir, shimName(".log")), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open shim server log: %w", err)
	}
	defer logf.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer readyR.Close()
	cmd := exec.Command(exe)
	cmd.Args = []string{"corral-shim"}
	// The server's own environment is not the commands' (each start
	// carries its own): pass nothing but what makes it a server.
	cmd.Env = []string{shimEnvVar + "=1:" + c.stateDir}
	cmd.Dir = "/"
	cmd.Stderr = logf
	cmd.ExtraFiles = []*os.File{readyW}
	// Its own session, outside every command's cgroup and group: a tree
	// kill never reaches the server, which must live to record exits.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	_ = readyW.Close()
	if err != nil {
		return fmt.Errorf("start shim server: %w", err)
	}
	if d, ok := ctx.Deadline(); ok {
		_ = readyR.SetReadDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = readyR.SetReadDeadline(time.Now()) })
	msg, readErr := io.ReadAll(io.LimitReader(readyR, 64<<10))
	stop()
	_ = cmd.Wait() // the first stage leaves as soon as the second runs
	if readErr != nil {
		return fmt.Errorf("wait for shim server: %w", readErr)
	}
	if string(msg) != "ok" {
		if len(msg) == 0 {
			msg = []byte("shim server exited without reporting; see " + filepath.Join(c.stateDir, shimName(".log")))
		}
		return fmt.Errorf("shim server: %s", msg)
	}
	return nil
}
