package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/procstat"
	"github.com/corralhq/corral/plugins/internal/wire"
	pb "github.com/corralhq/corral/plugins/proto"
)

// Options configures how plugins are found and started. The zero value
// works.
type Options struct {
	// Dirs are the plugin directories, searched in order. Nil means the
	// directories of $CORRAL_PLUGIN_PATH, then DefaultDir(), then the
	// running executable's.
	Dirs []string

	// Env holds extra KEY=VALUE variables for the plugin process. A plugin
	// gets only PATH, HOME, these, and go-plugin's own handshake
	// variables: never corral's whole environment, which may hold
	// credentials.
	Env []string

	// Owner, when set, identifies the supervisor to the plugin (sdk.Owner):
	// a plugin that creates sandboxes labels them with it, so that the same
	// daemon finds them again after a restart and no other one takes them.
	Owner string

	// Checksums pins plugin binaries: plugin name → SHA-256 of the binary
	// in hex. A plugin with an entry is verified before every start and
	// refused on mismatch.
	Checksums map[string]string

	// StartTimeout bounds a plugin's start and handshake. Default 30s.
	StartTimeout time.Duration

	// Logger receives the host's and the plugins' logs (plugin records
	// carry plugin=NAME). Default slog.Default().
	Logger *slog.Logger

	// dialOptions are added to the gRPC client's: tests watch or alter
	// the host's calls with interceptors.
	dialOptions []grpc.DialOption
}

func (o Options) withDefaults() Options {
	if o.StartTimeout <= 0 {
		o.StartTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// conn is one running plugin process: one generation of an Environment's
// plugin. A conn is never restarted (go-plugin cannot restart a Client);
// a crash means a new conn.
type conn struct {
	gen    uint64
	pid    int // the plugin process
	client *plugin.Client
	rpc    pb.BackendClient
	dead   chan struct{} // closed once the plugin is known dead

	pidfd     int // -1 when unavailable
	closeOnce sync.Once

	// noRun is set once the plugin answered Run with Unimplemented (it
	// was built before Run): processes then start with Start.
	noRun atomic.Bool

	spareMu sync.Mutex
	spare   *runStream // the Run stream opened ahead for the next Start
	noSpare bool       // the conn is closing
}

func (c *conn) markDead() {
	select {
	case <-c.dead:
	default:
		close(c.dead)
	}
}

func (c *conn) alive() bool {
	select {
	case <-c.dead:
		return false
	default:
	}
	// go-plugin notices a death only once it has reaped the process; the
	// kernel knows first, and a call must not go to a dead plugin.
	if c.client.Exited() || c.exited() {
		c.markDead()
		return false
	}
	return true
}

// exited asks the kernel whether the plugin process has ended (zombies
// included): a zero-timeout poll of its pidfd, a microsecond per call.
// Without pidfds (old kernels) it reads /proc.
func (c *conn) exited() bool {
	if c.pidfd >= 0 {
		return pidfdExited(c.pidfd)
	}
	return !processRunning(c.pid)
}

// processRunning reports whether pid exists and is not a zombie. Where
// /proc is missing, or says something it cannot parse, it assumes so and
// leaves detection to go-plugin.
func processRunning(pid int) bool {
	if pid <= 0 {
		return true
	}
	st, err := procstat.Read(pid)
	switch {
	case errors.Is(err, procstat.ErrMalformed):
		return true
	case err != nil:
		_, statErr := os.Stat("/proc/self/stat")
		return statErr != nil
	}
	return st.State != 'Z'
}

// kill stops the plugin process and releases the pidfd.
func (c *conn) kill() {
	c.dropRun()
	c.client.Kill()
	c.closeOnce.Do(func() {
		if c.pidfd >= 0 {
			closePidfd(c.pidfd)
		}
	})
}

// WorkDir is the working directory of every plugin process: "/", never
// corral's own, which depends on where corral (or its daemon) was started.
// corral sends an empty Spec.Dir when the user gave no --dir, so a command
// runs in its sandbox's default directory; a plugin whose default is
// inherited from its own process (a transport that runs local programs)
// gets "/" for it, the same wherever corral runs.
const WorkDir = "/"

// startPlugin starts the plugin binary of f and returns a conn on it.
func startPlugin(ctx context.Context, f Found, opts Options, gen uint64) (*conn, error) {
	if err := checkOwnership(f.Path); err != nil {
		return nil, err
	}
	var secure *plugin.SecureConfig
	if sum, ok := opts.Checksums[f.Name]; ok {
		b, err := hex.DecodeString(sum)
		if err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("plugins: checksum for %q is not a SHA-256 in hex", f.Name)
		}
		secure = &plugin.SecureConfig{Checksum: b, Hash: sha256.New()}
	}
	cmd := exec.Command(f.Path)
	cmd.Env = pluginEnv(opts)
	cmd.Dir = WorkDir
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  wire.Handshake,
		VersionedPlugins: wire.PluginSets(nil),
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		SkipHostEnv:      true,
		SecureConfig:     secure,
		StartTimeout:     opts.StartTimeout,
		Logger:           wire.HCLogToSlog(opts.Logger, f.Name),
		GRPCDialOptions:  append(wire.DialOptions(), opts.dialOptions...),
	})
	// go-plugin's start takes no context: run it aside so ctx still bounds
	// the caller; an abandoned start is killed.
	type result struct {
		rpc pb.BackendClient
		err error
	}
	done := make(chan result, 1)
	go func() {
		rc, err := client.Client()
		if err != nil {
			done <- result{err: err}
			return
		}
		raw, err := rc.Dispense(wire.PluginName)
		if err != nil {
			done <- result{err: err}
			return
		}
		rpc, ok := raw.(pb.BackendClient)
		if !ok {
			done <- result{err: fmt.Errorf("dispensed %T, not a backend client", raw)}
			return
		}
		done <- result{rpc: rpc}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			client.Kill()
			if errors.Is(r.err, plugin.ErrChecksumsDoNotMatch) {
				return nil, fmt.Errorf("%w %s: its SHA-256 does not match the pinned checksum", ErrRefused, f.Path)
			}
			return nil, fmt.Errorf("plugins: start %s: %v: %w", f.Path, r.err, env.ErrUnavailable)
		}
		pid := 0
		if rc := client.ReattachConfig(); rc != nil {
			pid = rc.Pid
		}
		pidfd := openPidfd(pid)
		return &conn{gen: gen, pid: pid, client: client, rpc: r.rpc, dead: make(chan struct{}), pidfd: pidfd}, nil
	case <-ctx.Done():
		go func() { <-done; client.Kill() }()
		return nil, fmt.Errorf("plugins: start %s: %w", f.Path, ctx.Err())
	}
}

// pluginEnv is the whole environment of a plugin process (go-plugin adds
// its handshake variables).
func pluginEnv(opts Options) []string {
	var out []string
	for _, name := range []string{"PATH", "HOME"} {
		if v, ok := os.LookupEnv(name); ok {
			out = append(out, name+"="+v)
		}
	}
	if opts.Logger.Enabled(context.Background(), slog.LevelDebug) {
		out = append(out, "CORRAL_PLUGIN_LOG_LEVEL=debug")
	}
	if opts.Owner != "" {
		out = append(out, wire.OwnerEnv+"="+opts.Owner)
	}
	return append(out, opts.Env...)
}
