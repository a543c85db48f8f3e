package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/corralhq/corral/env"
)

// MinAPIVersion is the oldest Engine API this backend works with (Docker
// 19.03); the client library refuses anything older.
const MinAPIVersion = client.MinAPIVersion

// pingTimeout bounds the eager version negotiation in connect: an engine
// that does not answer /_ping within it is treated as unreachable.
const pingTimeout = 15 * time.Second

// connect builds an engine client for host (or, when host is empty, the
// endpoint DOCKER_HOST or the current Docker context names) and negotiates
// the API version at once. Negotiation in the client library is otherwise
// lazy and swallows its error, so a too-old engine would fail later with
// an obscure message; here it fails now, naming the versions.
func connect(ctx context.Context, host string) (*client.Client, error) {
	ep := endpoint{Host: host, Source: "Options.Host"}
	if host == "" {
		var err error
		if ep, err = resolveEndpoint(os.Getenv); err != nil {
			return nil, err
		}
	}
	opts := []client.Opt{client.FromEnv}
	if ep.Host != "" && ep.Source != "DOCKER_HOST" {
		opts = append(opts, client.WithHost(ep.Host))
	}
	if ep.TLSDir != "" {
		ca := filepath.Join(ep.TLSDir, "ca.pem")
		if _, err := os.Stat(ca); err != nil {
			ca = ""
		}
		opts = append(opts, client.WithTLSClientConfig(ca, filepath.Join(ep.TLSDir, "cert.pem"), filepath.Join(ep.TLSDir, "key.pem")))
	}
	cli, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker: client for %s (%s): %w", displayHost(ep.Host), ep.Source, err)
	}
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	ping, err := cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true})
	if err != nil {
		cli.Close()
		if cerrdefs.IsInvalidArgument(err) {
			return nil, fmt.Errorf("docker: engine at %s (%s) is too old: %w; corral needs Engine API %s or newer (Docker 19.03+)", cli.DaemonHost(), ep.Source, err, MinAPIVersion)
		}
		return nil, fmt.Errorf("docker: engine at %s (%s) unreachable; is dockerd running and DOCKER_HOST or the docker context right? %w: %w", cli.DaemonHost(), ep.Source, env.ErrUnavailable, err)
	}
	if ping.OSType != "" && ping.OSType != "linux" {
		cli.Close()
		return nil, fmt.Errorf("docker: engine at %s runs %s containers; corral needs Linux containers", cli.DaemonHost(), ping.OSType)
	}
	return cli, nil
}

func displayHost(h string) string {
	if h == "" {
		return client.DefaultDockerHost
	}
	return h
}

// sandboxError classifies an engine error about container for the
// env contract: gone (removed or stopped) → env.ErrSandboxGone, engine
// unreachable → env.ErrUnavailable; anything else is returned wrapped.
func sandboxError(op, container string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("docker: %s in %s: %w", op, container, err)
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("docker: %s in %s: container removed: %w", op, container, env.ErrSandboxGone)
	case cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "paused"):
		return fmt.Errorf("docker: %s in %s: container is paused (docker unpause %s): %w: %w", op, container, container, env.ErrUnavailable, err)
	case cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "not running"):
		return fmt.Errorf("docker: %s in %s: container is not running: %w", op, container, env.ErrSandboxGone)
	case isConnectionError(err):
		return fmt.Errorf("docker: %s in %s: %w: %w", op, container, env.ErrUnavailable, err)
	default:
		return fmt.Errorf("docker: %s in %s: %w", op, container, err)
	}
}

// isConnectionError reports whether err means the engine could not be
// reached or the connection broke, as opposed to an answer from the engine.
func isConnectionError(err error) bool {
	if client.IsErrConnectionFailed(err) {
		return true
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var nerr net.Error
	return errors.As(err, &nerr)
}
