package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/moby/moby/client"
	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh/agent"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
	"github.com/corralhq/corral/internal/cli"
	"github.com/corralhq/corral/plugins"
	"github.com/corralhq/corral/registry"
)

// probe is one line of corral doctor: a capability, whether it works,
// and why (or why not).
type probe struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	// Status replaces "ok"/"missing" in the table when set.
	Status string `json:"status,omitempty"`
}

const probeTimeout = 5 * time.Second

func newDoctorCommand(stdout, stderr io.Writer) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: cli.EngineShort("doctor"),
		Long: `Probe each capability for real (start a process, ping the engine, ask the
agent, ask the Kubernetes API server its version and this user's
permissions through corral-backend-k8s check) and report ok or missing with
the reason. When the daemon runs, list the backends it holds open ("open ssh://..."): its condition when it does
not answer (paused, unreachable, gone: what the daemon's health check found,
since when and why), its connection (connected, idle, reconnecting), since
when, when an unused one is closed (corral serve --idle-close) and its
processes. Exit 0 whatever is missing:
the report is the result. Does not start the daemon.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			daemonProbe, open := probeDaemon(ctx)
			probes := append([]probe{daemonProbe}, open...)
			probes = append(probes, probeCgroup(), probeLimits(), probePTY(ctx), probeDocker(ctx), probeSSHAgent(), probeKubernetes(ctx))
			probes = append(probes, probePlugins(ctx)...)
			if asJSON {
				return cli.PrintJSON(stdout, probes)
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			for _, p := range probes {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, probeMark(p), cli.OneLine(p.Detail))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// probeDaemon reports the daemon, and one line for each backend it holds
// open ("what is warm").
func probeDaemon(ctx context.Context) (probe, []probe) {
	p := probe{Name: "daemon"}
	if why := cli.NoDaemon(); why != "" {
		p.Detail = why
		return p, nil
	}
	paths, err := daemon.DefaultPaths()
	if err != nil {
		p.Detail = err.Error()
		return p, nil
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	st, err := daemon.NewClient(paths.Socket).Status(ctx)
	if errors.Is(err, daemon.ErrNoDaemon) {
		p.Detail = "not running on " + paths.Socket + " (started on first use of start, ps, ...)"
		return p, nil
	}
	if err != nil {
		p.Detail = err.Error()
		return p, nil
	}
	p.OK = st.Notice == "" && st.CheckpointError == ""
	var n int
	for _, c := range st.Processes {
		n += c
	}
	p.Detail = fmt.Sprintf("pid %d on %s, %d processes tracked, state file %s", st.PID, st.Socket, n, st.StateFile)
	if !st.PeerCred {
		p.Detail += "; peer uid check unavailable on this OS (the socket's 0600 mode protects it)"
	}
	if st.Notice != "" {
		p.Detail += "; NOTICE: " + st.Notice
	}
	if st.CheckpointError != "" {
		p.Detail += "; CHECKPOINT FAILING: " + st.CheckpointError
	}
	if len(st.Backends) == 0 {
		p.Detail += "; no backend open"
	}
	open := make([]probe, 0, len(st.Backends))
	for _, b := range st.Backends {
		open = append(open, backendProbe(b, time.Now()))
	}
	return p, open
}

// backendProbe describes a backend the daemon holds open. It is ok unless
// its connection is down, or the daemon's health check found it paused,
// unreachable or gone, or its sandbox is gone (a removed container, until
// the next call opens the target again); its status then says which.
func backendProbe(b registry.BackendInfo, now time.Time) probe {
	p := probe{Name: "open " + b.Target, OK: true}
	parts := []string{}
	if b.Name != b.Target {
		parts = append(parts, b.Name)
	}
	if !b.OpenedAt.IsZero() {
		parts = append(parts, "opened "+ago(now, b.OpenedAt))
	}
	if c := b.Conn; c != nil {
		conn := "connection " + string(c.State)
		if !c.Since.IsZero() {
			conn += " since " + ago(now, c.Since)
		}
		if c.InUse > 0 {
			conn += fmt.Sprintf(", %d calls under way", c.InUse)
		}
		if !c.IdleCloseAt.IsZero() {
			conn += ", closes when idle in " + c.IdleCloseAt.Sub(now).Round(time.Second).String()
		}
		if c.Detail != "" {
			conn += " (" + c.Detail + ")"
		}
		parts = append(parts, conn)
		p.OK = c.State == env.ConnConnected || c.State == env.ConnIdle
		p.Status = string(c.State)
	}
	if h := b.Health; h.Condition != "" && h.Condition != env.ConditionOK {
		// What the daemon's health check found outranks the connection:
		// a paused container has no connection to speak of.
		cond := string(h.Condition)
		if !h.Since.IsZero() {
			cond += " since " + ago(now, h.Since)
		}
		if h.Detail != "" {
			cond += " (" + h.Detail + ")"
		}
		parts = append(parts, cond)
		p.OK = false
		p.Status = string(h.Condition)
	}
	parts = append(parts, fmt.Sprintf("%d processes tracked, %d running", b.Tracked, b.Running))
	if !b.OpenedAt.IsZero() {
		// What the opened target enforces; a gone one is not asked.
		parts = append(parts, "limits: "+limitsWords(b.Limits, b.LimitsNote))
	}
	p.Detail = strings.Join(parts, "; ")
	return p
}

// ago says how long before now t was, rounded to the second.
func ago(now, t time.Time) string {
	return now.Sub(t).Round(time.Second).String() + " ago"
}

// probeLocal returns a throwaway local environment with its state in a
// temporary directory.
func probeLocal() (env.Environment, func(), error) {
	dir, err := os.MkdirTemp("", "corral-doctor-")
	if err != nil {
		return nil, nil, err
	}
	e, err := local.New(local.Options{StateDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return e, func() { e.Close(); os.RemoveAll(dir) }, nil
}

func probeCgroup() probe {
	p := probe{Name: "cgroup-kill"}
	e, done, err := probeLocal()
	if err != nil {
		p.Detail = err.Error()
		return p
	}
	defer done()
	caps := e.Capabilities()
	p.OK = caps.TreeKill == "cgroup"
	if p.OK {
		p.Detail = "cgroup v2 cgroup.kill ends whole trees, escapees included"
	} else {
		p.Detail = fmt.Sprintf("tree kill uses %q: %s", caps.TreeKill, strings.Join(caps.Notes, "; "))
	}
	return p
}

// probeLimits reports the per-process limits (--memory, --cpus, --pids)
// the local backend enforces; ok when it enforces them all.
func probeLimits() probe {
	p := probe{Name: "limits (local)"}
	e, done, err := probeLocal()
	if err != nil {
		p.Detail = err.Error()
		return p
	}
	defer done()
	caps := e.Capabilities()
	p.OK = len(caps.Limits) == 3
	p.Detail = limitsSummary(caps)
	return p
}

func probePTY(ctx context.Context) probe {
	p := probe{Name: "pty"}
	e, done, err := probeLocal()
	if err != nil {
		p.Detail = err.Error()
		return p
	}
	defer done()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	sz := env.DefaultWindowSize
	h, err := e.Start(ctx, env.Spec{Command: "test -t 1", PTY: &sz})
	if err != nil {
		p.Detail = "cannot start a process on a pseudo-terminal: " + err.Error()
		return p
	}
	defer h.Release()
	if rd, err := h.Output(ctx, 0); err == nil {
		go func() { io.Copy(io.Discard, rd); rd.Close() }()
	}
	st, err := h.Wait(ctx)
	switch {
	case err != nil:
		p.Detail = err.Error()
	case !st.Success():
		p.Detail = "a process started with a PTY does not see a terminal (" + st.String() + ")"
	default:
		p.OK, p.Detail = true, "pseudo-terminals work"
	}
	return p
}

func probeDocker(ctx context.Context) probe {
	p := probe{Name: "docker"}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		p.Detail = err.Error()
		return p
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	ping, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
	if err != nil {
		p.Detail = fmt.Sprintf("engine at %s unreachable (DOCKER_HOST; docker contexts are not consulted here): %v", cli.DaemonHost(), err)
		return p
	}
	p.OK = ping.OSType == "" || ping.OSType == "linux"
	p.Detail = fmt.Sprintf("engine at %s, API %s (client negotiated %s), %s containers", cli.DaemonHost(), ping.APIVersion, cli.ClientVersion(), ping.OSType)
	return p
}

func probeSSHAgent() probe {
	p := probe{Name: "ssh-agent"}
	sock := os.Getenv("SSH_AUTH_SOCK")
	if sock == "" {
		p.Detail = "SSH_AUTH_SOCK is not set: ssh:// backends need keys from ~/.ssh/config IdentityFile"
		return p
	}
	conn, err := net.DialTimeout("unix", sock, probeTimeout)
	if err != nil {
		p.Detail = "cannot reach the agent at " + sock + ": " + err.Error()
		return p
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(probeTimeout))
	keys, err := agent.NewClient(conn).List()
	if err != nil {
		p.Detail = "agent at " + sock + " does not answer: " + err.Error()
		return p
	}
	p.OK = len(keys) > 0
	p.Detail = fmt.Sprintf("agent at %s holds %d keys", sock, len(keys))
	return p
}

// probePlugins reports the plugins found, then one line for each: started,
// asked for its version and capabilities, and stopped, as corral backends
// does. Its status is its health word; the detail gives the capabilities
// and notes it states, or why it is not ok.
func probePlugins(ctx context.Context) []probe {
	p := probe{Name: "plugins"}
	opts := plugins.Options{Logger: slog.New(slog.DiscardHandler)}
	found, err := plugins.Discover(opts)
	if err != nil {
		p.Detail = err.Error()
		return []probe{p}
	}
	if len(found) == 0 {
		p.Detail = "none found in $" + plugins.PathEnv + " or " + plugins.DefaultDir()
		return []probe{p}
	}
	var names []string
	for _, f := range found {
		names = append(names, f.Name+" ("+f.Path+")")
	}
	p.OK, p.Detail = true, strings.Join(names, ", ")
	out := []probe{p}
	for _, f := range found {
		if isBuiltinBackend(f.Name) {
			out = append(out, probe{Name: "plugin " + f.Name, Status: healthShadowed, Detail: "shadowed by the built-in backend of the same name"})
			continue
		}
		e := probePlugin(ctx, f, opts)
		q := probe{Name: "plugin " + f.Name, OK: e.Health == healthOK, Status: e.Health}
		parts := []string{}
		if e.Version != "" {
			parts = append(parts, "version "+e.Version)
		}
		if e.Error != "" {
			parts = append(parts, e.Error)
		}
		if c := e.Capabilities; c != nil {
			parts = append(parts, "capabilities: "+capsSummary(*c))
			for _, n := range c.Notes {
				parts = append(parts, "note: "+n)
			}
			parts = append(parts, "limits: "+limitsSummary(*c))
		} else if e.Health == healthOK {
			parts = append(parts, "states no capabilities (reported once a target is opened)")
		}
		q.Detail = strings.Join(parts, "; ")
		out = append(out, q)
	}
	return out
}
