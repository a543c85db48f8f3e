package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/corralhq/corral/env/local/secrets"
	"github.com/corralhq/corral/registry"
)

// serviceShutdownKill bounds the kill of a private registry's processes
// when the front end that hosts it ends.
const serviceShutdownKill = 30 * time.Second

// FrontEndService is the process service a long-lived front end (corral
// mcp, corral acp) drives: the daemon's, or with inProcess a private
// registry that lives and dies with the front end.
type FrontEndService struct {
	registry.Service
	// Dir and Environ are what a command gets when its request names no
	// directory, and the environment it starts from: for the local
	// backend, this process's working directory and environment (filtered
	// for credentials), which the agent expects its commands to have
	// (the daemon's are not).
	Dir     string
	Environ []string
	close   func()
}

// Close ends the private registry's processes and the registry, or lets go
// of the daemon connection.
func (s *FrontEndService) Close() { s.close() }

// OpenFrontEndService opens the service of front end what (mcp, acp).
func OpenFrontEndService(ctx context.Context, what, backend string, inProcess bool, allowEnv []string, stderr io.Writer) (*FrontEndService, error) {
	if inProcess {
		private, err := registry.New(registry.Config{
			Open:           engine.PrivateOpen(allowEnv),
			DefaultBackend: backend,
			Logger:         slog.Default(),
		})
		if err != nil {
			return nil, &exitError{code: exitCorralError, msg: fmt.Sprintf("%s: %v", what, err)}
		}
		return &FrontEndService{Service: private, close: func() {
			// This registry lives only as long as the front end: nobody
			// could find a process it leaves behind, so end them all,
			// detached or not, before closing.
			kctx, cancel := context.WithTimeout(context.Background(), serviceShutdownKill)
			defer cancel()
			if res, err := private.KillAll(kctx, registry.KillAllOptions{}); err != nil {
				slog.Warn("killing the processes left running", "killed", len(res), "err", err)
			}
			if err := private.Close(); err != nil {
				slog.Warn("closing the registry", "err", err)
			}
			engine.WaitSandboxRemovals()
		}}, nil
	}
	c, _, err := connect(ctx, stderr)
	if err != nil {
		return nil, err
	}
	s := &FrontEndService{Service: c, close: c.CloseIdle}
	if backend == "local" {
		if wd, err := os.Getwd(); err == nil {
			s.Dir = wd
		}
		s.Environ = secrets.CommandEnviron(os.Environ(), allowEnv)
	}
	return s, nil
}
