package main

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
	"github.com/corralhq/corral/plugins"
)

// probe is one line of corral doctor: a capability, whether it works,
// and why (or why not).
type probe struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

const probeTimeout = 5 * time.Second

func newDoctorCommand(stdout, stderr io.Writer) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check what this machine supports: daemon, cgroup kill, PTY, Docker, ssh-agent, plugins",
		Long: `Probe each capability for real (start a process, ping the engine, ask the
agent) and report ok or missing with the reason. Exit 0 whatever is missing:
the report is the result. Does not start the daemon.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := orBackground(cmd.Context())
			probes := []probe{probeDaemon(ctx), probeCgroup(), probePTY(ctx), probeDocker(ctx), probeSSHAgent(), probePlugins()}
			if asJSON {
				return printJSON(stdout, probes)
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			for _, p := range probes {
				mark := "ok"
				if !p.OK {
					mark = "missing"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, mark, oneLine(p.Detail))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func probeDaemon(ctx context.Context) probe {
	p := probe{Name: "daemon"}
	paths, err := daemon.DefaultPaths()
	if err != nil {
		p.Detail = err.Error()
		return p
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	st, err := daemon.NewClient(paths.Socket).Status(ctx)
	if errors.Is(err, daemon.ErrNoDaemon) {
		p.Detail = "not running on " + paths.Socket + " (started on first use of start, ps, ...)"
		return p
	}
	if err != nil {
		p.Detail = err.Error()
		return p
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
	return p
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

func probePlugins() probe {
	p := probe{Name: "plugins"}
	found, err := plugins.Discover(plugins.Options{})
	if err != nil {
		p.Detail = err.Error()
		return p
	}
	if len(found) == 0 {
		p.Detail = "none found in $" + plugins.PathEnv + " or " + plugins.DefaultDir()
		return p
	}
	var names []string
	for _, f := range found {
		names = append(names, f.Name+" ("+f.Path+")")
	}
	p.OK, p.Detail = true, strings.Join(names, ", ")
	return p
}
