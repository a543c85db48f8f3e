package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/acpterm"
	"github.com/corralhq/corral/internal/backends"
	"github.com/corralhq/corral/internal/cli"
	"github.com/corralhq/corral/internal/targets"
	"github.com/corralhq/corral/registry"
)

// acpOptions are the flags of `corral acp`.
type acpOptions struct {
	backend   string
	inProcess bool
	allowEnv  []string
	grace     time.Duration
}

// agentStopGrace is how long the agent gets to exit after its stdin
// closes, and again after SIGTERM, before the next step.
const agentStopGrace = 5 * time.Second

const acpLong = `Sit between an editor and an ACP (Agent Client Protocol) agent, and run the
agent's terminals with corral.

The editor starts "corral acp -- AGENT_COMMAND..." as its agent; corral starts
the real agent as a child and relays every JSON-RPC message between the two,
byte for byte, except that it tells the agent the client supports terminals
(initialize) and answers the agent's terminal/create, terminal/output,
terminal/wait_for_exit, terminal/kill and terminal/release itself, on --backend:
the agent's commands run there (a docker container, an ssh host), are killed as
a whole process tree, and show in corral ps with the label acp-session=ID.

When the agent exits or the editor disconnects, corral kills every terminal the
agent created and did not release, then exits with the agent's exit code. By
default the terminals run in the corral daemon (started if none runs), which
holds the proxy's session lease: if corral acp is killed, the daemon kills the
terminals. On the local backend they get this process's working directory and
environment (minus credentials, see --allow-env), not the daemon's.
--in-process hosts a private registry instead.

See docs/acp.md for editor configuration. Diagnostics go to stderr, never to
stdout (which carries the protocol).`

func newACPCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	var o acpOptions
	cmd := &cobra.Command{
		Use:   "acp [flags] -- AGENT_COMMAND [ARG...]",
		Short: cli.EngineShort("acp"),
		Long:  acpLong,
		Example: `  corral acp -- claude-code-acp
  corral acp --backend docker://sandbox -- gemini --experimental-acp
  corral acp --backend ssh://build-host -- my-agent --stdio`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New(`acp: give the agent's command after "--", for example: corral acp -- claude-code-acp`)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runACP(cmd.Context(), o, args, stdin, stdout, stderr)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.backend, "backend", targets.Default, "where the agent's terminals run: "+targets.Help)
	f.BoolVar(&o.inProcess, "in-process", false, "host a private registry instead of using the corral daemon's; every terminal ends with the proxy")
	f.StringArrayVar(&o.allowEnv, "allow-env", nil, "pass this secret-looking variable of corral's environment on to terminals (repeatable)")
	f.DurationVar(&o.grace, "grace", 0, "time between SIGTERM and SIGKILL when a terminal is killed (default: the registry's, 5s)")
	return cmd
}

func runACP(parent context.Context, o acpOptions, agentArgv []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if err := backends.Check(o.backend); err != nil {
		return cli.UsageErrorf("acp: %v", err)
	}
	if o.grace < 0 {
		return cli.UsageErrorf("acp: --grace %s is negative: give a duration such as 5s", o.grace)
	}
	agentPath, err := exec.LookPath(agentArgv[0])
	if err != nil {
		return cli.UsageErrorf("acp: agent command %q: %v", agentArgv[0], err)
	}
	if parent == nil {
		parent = context.Background()
	}
	ctx, stop := signal.NotifyContext(parent, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	svc, err := cli.OpenFrontEndService(ctx, "acp", o.backend, o.inProcess, o.allowEnv, stderr)
	if err != nil {
		return err
	}
	defer svc.Close()
	terms, err := acpterm.New(acpterm.Config{Service: svc.Service, Backend: o.backend, Dir: svc.Dir, Environ: svc.Environ,
		Env: registry.AgentEnv, Grace: o.grace, Logger: slog.Default()})
	if err != nil {
		return cli.Exit(cli.ExitCorralError, fmt.Sprintf("acp: %v", err))
	}

	agent := exec.Command(agentPath, agentArgv[1:]...)
	agent.Stderr = stderr
	agent.SysProcAttr = agentProcAttr()
	agentIn, err := agent.StdinPipe()
	if err != nil {
		return cli.Exit(cli.ExitCorralError, fmt.Sprintf("acp: %v", err))
	}
	agentOut, err := agent.StdoutPipe()
	if err != nil {
		return cli.Exit(cli.ExitCorralError, fmt.Sprintf("acp: %v", err))
	}
	if err := agent.Start(); err != nil {
		return cli.Exit(cli.ExitCorralError, fmt.Sprintf("acp: start the agent %q: %v", agentArgv[0], err))
	}
	proxy := &acpterm.Proxy{Terminals: terms, Logger: slog.Default()}
	why, closeErr := proxy.Run(ctx, acpterm.Streams{EditorIn: stdin, EditorOut: stdout, AgentIn: agentIn, AgentOut: agentOut})
	if closeErr != nil {
		fmt.Fprintf(stderr, "corral acp: %v\n", closeErr)
	}
	// Wait closes agentOut, so it comes only once the relay has read it to
	// the end (the agent ended) or stopped caring (the editor went away).
	waited := make(chan error, 1)
	go func() { waited <- agent.Wait() }()
	if why == acpterm.AgentEnded {
		err = <-waited
	} else {
		// Run closed the agent's stdin: a well-behaved agent exits on its
		// own; one that does not is stopped, with what it started.
		err = stopAgent(agent.Process.Pid, waited)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee) && why == acpterm.AgentEnded:
		if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			return cli.Exit(128+int(st.Signal()), fmt.Sprintf("acp: the agent was killed by %v", st.Signal()))
		}
		return cli.Exit(ee.ExitCode(), "")
	case errors.As(err, &ee):
		return nil // stopped by us, after the editor went away
	}
	return cli.Exit(cli.ExitCorralError, fmt.Sprintf("acp: wait for the agent: %v", err))
}

// stopAgent gives the agent agentStopGrace to exit after its stdin
// closed, then TERMs its process group, then KILLs it, and returns what
// Wait returned.
func stopAgent(pid int, waited <-chan error) error {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		select {
		case err := <-waited:
			return err
		case <-time.After(agentStopGrace):
		}
		slog.Warn("acp: the agent did not exit after its editor went away; signalling it", "pid", pid, "signal", sig)
		_ = signalAgent(pid, sig)
	}
	return <-waited
}
