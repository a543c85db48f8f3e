package ssh

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
)

// Options configures a connection. The zero value reads ~/.ssh/config and
// ~/.ssh/known_hosts, uses ssh-agent and the default identity files, and
// refuses unknown hosts.
type Options struct {
	// ConfigFile is the ssh_config file to read. Empty reads
	// ~/.ssh/config then /etc/ssh/ssh_config; a path reads only that file
	// (as ssh -F does); "none" reads no config.
	ConfigFile string

	// Home replaces the user's home directory for ~ and the default files
	// (~/.ssh/config, ~/.ssh/known_hosts, ~/.ssh/id_*). Empty: $HOME.
	Home string

	// KnownHostsFiles replaces the known_hosts files from the config and
	// the defaults. The first file receives entries under HostKeyAcceptNew.
	KnownHostsFiles []string

	// HostKeyPolicy says what to do with an unknown host. A changed key is
	// always refused.
	HostKeyPolicy HostKeyPolicy

	// IdentityFiles are private key files tried after the agent's keys and
	// before the config's IdentityFile entries.
	IdentityFiles []string

	// AgentSocket is the ssh-agent socket. Empty: the config's
	// IdentityAgent, else $SSH_AUTH_SOCK; "none" disables the agent.
	AgentSocket string

	// ConnectTimeout bounds the TCP connect (default 15s), and
	// HandshakeTimeout the SSH handshake and authentication after it
	// (default 20s).
	ConnectTimeout   time.Duration
	HandshakeTimeout time.Duration

	// KeepAliveInterval is the time between keepalive@openssh.com requests
	// (default 15s; negative disables them). A request unanswered after
	// KeepAliveTimeout (default 15s) drops the connection, which is then
	// re-established.
	KeepAliveInterval time.Duration
	KeepAliveTimeout  time.Duration

	// ReconnectMin and ReconnectMax bound the exponential backoff between
	// reconnect attempts (defaults 200ms and 10s).
	ReconnectMin time.Duration
	ReconnectMax time.Duration

	// ReconnectWait is how long an Exec waits for a dropped connection to
	// come back before failing with env.ErrUnavailable (default 3s;
	// negative: fail at once). Nothing has been sent to the host then, so
	// the wait never runs a script twice.
	ReconnectWait time.Duration

	// IdleClose, when positive, closes the connection after that long
	// without a call (a running process's output is polled, which counts
	// as a call), together with its resident shells; the next call dials
	// again. Zero keeps the connection open until Close, reconnecting
	// when it drops. Remote processes are not affected either way.
	IdleClose time.Duration

	// MaxSessions is how many sessions are open on the connection at once
	// (default 10, OpenSSH's MaxSessions); more Execs queue.
	MaxSessions int

	// Residents bounds the resident shells (sessions that stay open, each
	// a shell with the engine's library loaded: a call is one request on
	// it). Default, 0: half of MaxSessions; negative: none, every call is
	// a session of its own.
	Residents int

	// LogMax bounds each process's log on the host
	// (nohup.Options.LogMax): 0 means env.DefaultLogMax, negative no
	// bound. A host without util-linux fallocate keeps whole logs.
	LogMax int64

	// Dial opens the TCP connection (default net.Dialer). Tests and
	// proxies replace it.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)

	// BaseDir is the directory on the host under which process state is
	// kept; empty leaves the choice to env/nohup.
	BaseDir string

	// Logger receives connection events (drops, reconnects, refused host
	// keys). Nil: slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() (Options, string, error) {
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 15 * time.Second
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 20 * time.Second
	}
	if o.KeepAliveInterval == 0 {
		o.KeepAliveInterval = 15 * time.Second
	}
	if o.KeepAliveTimeout <= 0 {
		o.KeepAliveTimeout = 15 * time.Second
	}
	if o.ReconnectMin <= 0 {
		o.ReconnectMin = 200 * time.Millisecond
	}
	if o.ReconnectMax <= 0 {
		o.ReconnectMax = 10 * time.Second
	}
	if o.ReconnectMax < o.ReconnectMin {
		o.ReconnectMax = o.ReconnectMin
	}
	if o.ReconnectWait == 0 {
		o.ReconnectWait = 3 * time.Second
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = 10
	}
	if o.Dial == nil {
		var d net.Dialer
		o.Dial = d.DialContext
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	home := o.Home
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return o, "", fmt.Errorf("ssh: no home directory for ~/.ssh (set Options.Home): %w", err)
		}
		home = h
	}
	return o, home, nil
}

// Transport is the shared connection to one host. It implements
// nohup.Transport; Open builds an Environment on it.
type Transport struct {
	name string
	c    *conn
}

// Dial resolves target (ssh://[user@]host[:port], the host possibly an
// ssh_config alias), connects and authenticates. It fails at once when the
// host is unreachable (env.ErrUnavailable), its key is unknown or changed
// (ErrHostKeyUnknown, ErrHostKeyChanged) or no key is accepted
// (ErrAuthFailed, ErrKeyEncrypted). The connection then stays up, with
// keepalives and reconnects, until Close.
func Dial(ctx context.Context, target string, opts Options) (*Transport, error) {
	d, err := newDialer(target, opts)
	if err != nil {
		return nil, err
	}
	c, err := newConn(ctx, d)
	if err != nil {
		return nil, err
	}
	return &Transport{name: d.name, c: c}, nil
}

// newDialer parses and resolves target, including its ProxyJump hops.
func newDialer(target string, opts Options) (*dialer, error) {
	opts, home, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	dest, err := parseTarget(target)
	if err != nil {
		return nil, err
	}
	r, err := resolve(dest, opts, home)
	if err != nil {
		return nil, err
	}
	d := newHopDialer(r, opts)
	// ProxyJump "a,b": connect to a, through it to b, through b to the
	// target. Each hop is resolved through the same config; a hop's own
	// ProxyJump is not followed, which bounds the chain.
	if r.proxyJump != "" {
		prev := (*dialer)(nil)
		for _, hop := range strings.Split(r.proxyJump, ",") {
			hd, err := parseJump(strings.TrimSpace(hop))
			if err != nil {
				return nil, fmt.Errorf("ssh: ProxyJump for %s: %w", r.alias, err)
			}
			hr, err := resolve(hd, opts, home)
			if err != nil {
				return nil, fmt.Errorf("ssh: ProxyJump for %s: %w", r.alias, err)
			}
			hr.proxyJump = ""
			hopDialer := newHopDialer(hr, opts)
			hopDialer.jump = prev
			prev = hopDialer
		}
		d.jump = prev
	}
	return d, nil
}

func newHopDialer(r resolved, opts Options) *dialer {
	name := "ssh://" + r.user + "@" + hostPortName(r.alias, r.port)
	log := opts.Logger.With("target", name)
	return &dialer{
		name:     name,
		r:        r,
		opts:     opts,
		hostKeys: &hostKeys{files: r.knownHostsFiles, policy: opts.HostKeyPolicy, log: log},
		log:      log,
	}
}

// parseJump parses one ProxyJump hop, [user@]host[:port] or an ssh:// URL.
func parseJump(hop string) (destination, error) {
	if !strings.HasPrefix(hop, "ssh://") {
		hop = "ssh://" + hop
	}
	return parseTarget(hop)
}

func hostPortName(host string, port int) string {
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return host + ":" + strconv.Itoa(port)
}

// Name is the canonical target, ssh://user@host:port, with host as written
// in the target (an alias stays an alias).
func (t *Transport) Name() string { return t.name }

// Exec implements nohup.Transport; see conn.Exec.
func (t *Transport) Exec(ctx context.Context, script string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	return t.c.Exec(ctx, script, stdin, stdout, stderr)
}

// OpenShell implements nohup.ShellTransport; see conn.openShell.
func (t *Transport) OpenShell(ctx context.Context, script string) (*nohup.Shell, error) {
	return t.c.openShell(ctx, script)
}

// TrackCall implements nohup.CallTracker: a call on a resident shell is a
// use of the connection, which its idle close waits for.
func (t *Transport) TrackCall() (done func()) { return t.c.use() }

// MaxShells is how many resident shells the engine should keep: half the
// sessions the server allows, the rest left to execs and long polls.
func (t *Transport) MaxShells() int { return max(1, t.c.d.opts.MaxSessions/2) }

// WaitConnected blocks until the connection is up (immediately unless it
// dropped and is being re-established) or ctx is done.
func (t *Transport) WaitConnected(ctx context.Context) error { return t.c.waitUp(ctx) }

// ConnStatus implements env.ConnReporter.
func (t *Transport) ConnStatus() env.ConnStatus { return t.c.connStatus() }

// Health implements env.HealthChecker from the connection: ok while it is
// up and answers a keepalive within ctx (or is closed for idleness, which
// the next call re-opens), unreachable while it is down and being
// re-established, or when the keepalive gets no answer in time (a host
// that went silent, a blackholed route: what the supervisor's own
// keepalive takes Options.KeepAliveTimeout to call dead).
func (t *Transport) Health(ctx context.Context) env.Health { return t.c.health(ctx) }

var _ env.HealthChecker = (*Transport)(nil)

// Close closes the connection and stops reconnecting. Idempotent.
func (t *Transport) Close() error { return t.c.Close() }
