package integration

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
	"github.com/corralhq/corral/registry"
)

// BenchmarkStartTrue compares starting `true` through the daemon with the
// local backend in-process, in the same run:
//
//	/corral   `corral start -- true` (CLI process + socket + daemon + detached start)
//	/client   the daemon API's Start from this process (socket + daemon + start)
//	/baseline env/local Start of a detached `true`, in-process
func BenchmarkStartTrue(b *testing.B) {
	bin := buildCorral(b)
	root, err := os.MkdirTemp("", "cdb")
	require.NoError(b, err)
	defer os.RemoveAll(root)
	home, rt := filepath.Join(root, "h"), filepath.Join(root, "r")
	os.MkdirAll(home, 0o700)
	os.MkdirAll(rt, 0o700)
	envv := append(os.Environ(), "HOME="+home, "XDG_RUNTIME_DIR="+rt, "XDG_STATE_HOME=", "CORRAL_SOCKET=")
	serve := exec.Command(bin, "serve", "--log-level", "off")
	serve.Env = envv
	require.NoError(b, serve.Start())
	defer func() { serve.Process.Kill(); serve.Wait() }()
	c := daemon.NewClient(filepath.Join(rt, "corral", "corral.sock"))
	defer c.CloseIdle()
	ctx := context.Background()
	for i := 0; ; i++ {
		if _, err := c.Status(ctx); err == nil {
			break
		}
		if i > 1000 {
			require.FailNow(b, "corral serve did not come up")
		}
		time.Sleep(10 * time.Millisecond)
	}
	defer c.Shutdown(ctx, true)

	b.Run("corral", func(b *testing.B) {
		for b.Loop() {
			cmd := exec.Command(bin, "start", "--", "true")
			cmd.Env = envv
			out, err := cmd.Output()
			if err != nil || !strings.HasPrefix(string(out), "proc_") {
				require.FailNow(b, fmt.Sprintf("start: %v %q", err, out))
			}
		}
	})
	b.Run("client", func(b *testing.B) {
		for b.Loop() {
			_, err := c.Start(ctx, registry.StartOptions{Command: "true", Dir: "/"})
			require.NoError(b, err)
		}
	})
	b.Run("baseline", func(b *testing.B) {
		e, err := local.New(local.Options{StateDir: b.TempDir(), Logger: slog.New(slog.DiscardHandler)})
		require.NoError(b, err)
		defer e.Close()
		for b.Loop() {
			h, err := e.Start(ctx, env.Spec{Command: "true", Detach: true})
			require.NoError(b, err)
			h.Release()
		}
	})
}
