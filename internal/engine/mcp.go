package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/corralhq/corral/internal/backends"
	"github.com/corralhq/corral/internal/cli"
	"github.com/corralhq/corral/internal/targets"
	"github.com/corralhq/corral/mcp"
)

// mcpOptions are the flags of `corral mcp`.
type mcpOptions struct {
	backend   string
	inProcess bool
	http      string
	tokenFile string
	allowEnv  []string
	maxOutput int
}

const mcpLong = `Serve corral to an MCP client (a coding agent) as two tools: "terminal" runs
shell commands in the foreground or background, "process" lists, polls, reads,
waits for, kills and feeds stdin to them, and drains their events.

By default the server speaks MCP over stdin/stdout (register "corral" with
args ["mcp"] in the client's configuration; see docs/mcp.md) and runs its
processes in the corral daemon (started if none runs), so corral ps shows them
and corral kill ends them. Each MCP session labels its processes
mcp-session=ID; when the session ends, corral kills those it left running,
except those started with persist: they stay in corral ps for a later session
or a person. The daemon holds each session's lease, so it does so too when
corral mcp is killed. On the local backend, commands get this process's working
directory and environment (minus credentials, see --allow-env), not the
daemon's. --in-process hosts a private registry instead, whose processes all
end with the server. With --http HOST:PORT it serves the streamable HTTP
transport at http://HOST:PORT/mcp on a loopback address only, guarded by a
bearer token read from --token-file or generated and printed on stderr.

Diagnostics go to stderr, never to stdout (which carries the protocol).`

func newMCPCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	var o mcpOptions
	cmd := &cobra.Command{
		Use:   "mcp [flags]",
		Short: cli.EngineShort("mcp"),
		Long:  mcpLong,
		Example: `  corral mcp                                  # stdio, for an MCP client's config
  corral mcp --backend docker://sandbox
  corral mcp --http 127.0.0.1:8765 --token-file ~/.config/corral/token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runMCP(cmd.Context(), o, stdin, stdout, stderr)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.backend, "backend", targets.Default, "where commands run: "+targets.Help)
	f.BoolVar(&o.inProcess, "in-process", false, "host a private registry instead of using the corral daemon's; every process ends with the server")
	f.StringVar(&o.http, "http", "", "serve streamable HTTP on this loopback HOST:PORT instead of stdio")
	f.StringVar(&o.tokenFile, "token-file", "", "with --http: file holding the bearer token (default: generate one and print it on stderr)")
	f.StringArrayVar(&o.allowEnv, "allow-env", nil, "pass this secret-looking variable of corral's environment on to commands (repeatable)")
	f.IntVar(&o.maxOutput, "max-output", mcp.DefaultMaxOutput, "cap on the output bytes of one tool result (head and tail kept)")
	return cmd
}

func runMCP(parent context.Context, o mcpOptions, stdin io.Reader, stdout, stderr io.Writer) error {
	if err := backends.Check(o.backend); err != nil {
		return cli.UsageErrorf("mcp: %v", err)
	}
	if o.maxOutput <= 0 {
		return cli.UsageErrorf("mcp: --max-output %d: use a positive number of bytes", o.maxOutput)
	}
	if o.tokenFile != "" && o.http == "" {
		return cli.UsageErrorf("mcp: --token-file needs --http")
	}
	var token string
	if o.http != "" {
		if err := mcp.CheckLoopback(o.http); err != nil {
			return cli.UsageErrorf("mcp: %v", err)
		}
		if o.tokenFile != "" {
			t, err := mcp.ReadTokenFile(o.tokenFile)
			if err != nil {
				return cli.UsageErrorf("mcp: %v", err)
			}
			token = t
		} else {
			token = mcp.NewToken()
		}
	}
	if parent == nil {
		parent = context.Background()
	}
	ctx, stop := signal.NotifyContext(parent, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	svc, err := cli.OpenFrontEndService(ctx, "mcp", o.backend, o.inProcess, o.allowEnv, stderr)
	if err != nil {
		return err
	}
	defer svc.Close()
	cfg := mcp.Config{Registry: svc.Service, Backend: o.backend, MaxOutput: o.maxOutput,
		Version: cli.Version(), Logger: slog.Default(), Dir: svc.Dir, Environ: svc.Environ}
	srv, err := mcp.New(cfg)
	if err != nil {
		return cli.Exit(cli.ExitCorralError, fmt.Sprintf("mcp: %v", err))
	}
	defer srv.Close()

	if o.http == "" {
		t := &sdk.IOTransport{Reader: io.NopCloser(stdin), Writer: nopWriteCloser{stdout}}
		if err := srv.Run(ctx, t); err != nil {
			return cli.Exit(cli.ExitCorralError, err.Error())
		}
		return nil
	}
	return serveMCPHTTP(ctx, srv, o.http, token, o.tokenFile != "", stderr)
}

func serveMCPHTTP(ctx context.Context, srv *mcp.Server, addr, token string, fromFile bool, stderr io.Writer) error {
	h, err := srv.HTTPHandler(token)
	if err != nil {
		return cli.UsageErrorf("mcp: %v", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return cli.Exit(cli.ExitCorralError, fmt.Sprintf("mcp: listen on %s: %v", addr, err))
	}
	url := "http://" + ln.Addr().String() + mcp.HTTPPath
	if fromFile {
		fmt.Fprintf(stderr, "corral mcp: serving %s (bearer token from the token file)\n", url)
	} else {
		fmt.Fprintf(stderr, "corral mcp: serving %s with bearer token %s\n", url, token)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return cli.Exit(cli.ExitCorralError, fmt.Sprintf("mcp: serve %s: %v", url, err))
	case <-ctx.Done():
	}
	// Sessions hold long-lived streams; end them before waiting for the
	// handlers.
	_ = srv.Close()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = hs.Close()
	}
	<-errc
	return nil
}

// nopWriteCloser keeps the MCP transport from closing corral's stdout.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
