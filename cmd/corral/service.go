package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/corralhq/corral/env/local"
	"github.com/corralhq/corral/registry"
)

// serviceShutdownKill bounds the kill of a private registry's processes
// when the front end that hosts it ends.
const serviceShutdownKill = 30 * time.Second

// frontEndService is the process service a long-lived front end (corral
// mcp, corral acp) drives: the daemon's, or with inProcess a private
// registry that lives and dies with the front end.
type frontEndService struct {
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
func (s *frontEndService) Close() { s.close() }

func openFrontEndService(ctx context.Context, what, backend string, inProcess bool, allowEnv []string, stderr io.Writer) (*frontEndService, error) {
	if inProcess {
		private, err := registry.New(registry.Config{
			Open:           backendOptions{allowEnv: allowEnv, owner: privateOwner(), private: true}.open,
			DefaultBackend: backend,
			Logger:         slog.Default(),
		})
		if err != nil {
			return nil, &exitError{code: exitCorralError, msg: fmt.Sprintf("%s: %v", what, err)}
		}
		return &frontEndService{Service: private, close: func() {
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
			waitSandboxRemovals()
		}}, nil
	}
	c, _, err := connect(ctx, stderr)
	if err != nil {
		return nil, err
	}
	s := &frontEndService{Service: c, close: c.CloseIdle}
	if backend == "local" {
		if wd, err := os.Getwd(); err == nil {
			s.Dir = wd
		}
		s.Environ = local.CommandEnviron(os.Environ(), allowEnv)
	}
	return s, nil
}
