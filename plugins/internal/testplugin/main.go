// Command testplugin is a backend plugin for corral's own tests, built as
// corral-backend-hostsh: a nohup.Transport that runs every script with the
// host's /bin/sh (no isolation at all) served with sdk.ServeTransport, and
// capabilities it states itself (sdk.Plugin.Capabilities) so that tests can
// see them cross the boundary: on Open, in `corral backends` and in
// `corral doctor`.
//
// Target: hostsh://?base=DIR, DIR being the engine's BaseDir (default: the
// engine's own).

//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/corralhq/corral/env/nohup"
	"github.com/corralhq/corral/plugins/sdk"
)

// TreeKill and Note are what the plugin states beyond the engine's
// capabilities.
const (
	TreeKill = "pgroup+scan (hostsh)"
	Note     = "hostsh: no isolation, scripts run on the host (a test plugin)"
)

func main() {
	caps := sdk.EngineCapabilities()
	caps.TreeKill = TreeKill
	caps.Notes = append(caps.Notes, Note)
	sdk.ServeTransport(sdk.Plugin{
		Name:         "hostsh",
		Version:      "0.0.1-test",
		Description:  "the host's /bin/sh through ServeTransport (tests only)",
		Capabilities: &caps,
	}, open)
}

func open(_ context.Context, target string) (nohup.Transport, nohup.Options, error) {
	rest, ok := strings.CutPrefix(target, "hostsh://")
	if !ok {
		return nil, nohup.Options{}, fmt.Errorf("hostsh: target %q: want hostsh://[?base=DIR]", target)
	}
	_, query, _ := strings.Cut(rest, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, nohup.Options{}, fmt.Errorf("hostsh: target %q: %w", target, err)
	}
	return hostShell{}, nohup.Options{Name: "hostsh://", BaseDir: q.Get("base")}, nil
}

// hostShell runs scripts with the host's /bin/sh: the host is the one
// long-lived sandbox, what a script leaves running outlives it, and the
// host's init reaps orphans.
type hostShell struct{}

func (hostShell) Exec(ctx context.Context, script string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	// When ctx ends, end the script's shell and what it runs in its
	// process group (a follow's sleep), not what it started in a session
	// of its own (the engine's commands).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return -1, ctx.Err()
	}
	return sdk.ScriptExit(err)
}
