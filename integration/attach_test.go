package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tmuxServer is a tmux server of the test's own (its socket in a temp
// dir), whose sessions run with the daemon home's environment.
type tmuxServer struct {
	t    *testing.T
	sock string
	env  []string
}

func newTmux(t *testing.T, env []string) *tmuxServer {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		require.True(t, os.Getenv("CORRAL_REQUIRE_TMUX") != "1", "tmux is required (CORRAL_REQUIRE_TMUX=1): apt-get install tmux")
		t.Skip("tmux not installed (apt-get install tmux): corral attach is driven through it (set CORRAL_REQUIRE_TMUX=1 to fail instead)")
	}
	s := &tmuxServer{t: t, sock: filepath.Join(t.TempDir(), "tmux.sock"), env: append(env, "TERM=xterm-256color")}
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", s.sock, "kill-server").Run() })
	return s
}

func (s *tmuxServer) run(args ...string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "tmux", append([]string{"-S", s.sock}, args...)...)
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	require.NoError(s.t, err, "tmux %q: %s", args, out)
	return string(out)
}

// pane returns what session's pane shows, blank lines dropped.
func (s *tmuxServer) pane(session string) string {
	return s.run("capture-pane", "-p", "-J", "-t", session)
}

// waitPane waits until session's pane shows every one of want.
func (s *tmuxServer) waitPane(session string, want ...string) {
	s.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		p := s.pane(session)
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(p, w)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			require.FailNowf(s.t, "tmux pane", "session %s does not show %q within a minute; it shows:\n%s", session, want, p)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestAttachUnderTmux drives corral attach as a person would, in tmux, on
// the local backend and in a docker container: the recent output is
// replayed, keys reach the process, its terminal follows a resize, a
// second, read-only attach watches the same output, Ctrl-] detaches and
// leaves the process running, and a re-attach replays and ends with the
// process's exit code.
func TestAttachUnderTmux(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the corral binary under tmux")
	}
	h := newDaemonHome(t, buildCorral(t))
	tm := newTmux(t, h.env)
	sandbox := fmt.Sprintf("corral-attach-test-%08x", rand.Uint32())
	for _, b := range []struct{ name, target string }{
		{"local", "local"},
		{"docker", "docker-image://" + dockerTestImage + "?network=none&name=" + sandbox},
	} {
		t.Run(b.name, func(t *testing.T) {
			if b.name == "docker" {
				cli := requireDocker(t)
				t.Cleanup(func() { removeContainer(cli, sandbox) })
			}
			hh := h.with(t)
			tm.t = t
			script := `echo hello-before; while read l; do [ "$l" = quit ] && exit 3; echo "got:$l"; stty size; done`
			id := strings.TrimSpace(hh.mustRun("start", "--backend", b.target, "--pty", "--stdin", "--", script))
			attach := func(session string, flags ...string) {
				line := h.bin + " attach " + strings.Join(flags, " ") + " " + id + "; echo ATTACH-EXIT=$?; sleep 600"
				tm.run("new-session", "-d", "-s", session, "-x", "90", "-y", "20", line)
			}
			a, w, c := b.name+"-a", b.name+"-w", b.name+"-c"
			attach(a)
			tm.waitPane(a, "hello-before", "ctrl-] detaches")
			tm.run("send-keys", "-t", a, "abc", "Enter")
			tm.waitPane(a, "got:abc", "20 90")

			attach(w, "--read-only")
			tm.waitPane(w, "hello-before", "got:abc", "watching "+id)
			tm.run("resize-window", "-t", a, "-x", "100", "-y", "30")
			tm.run("send-keys", "-t", a, "def", "Enter")
			tm.waitPane(a, "got:def", "30 100")
			tm.waitPane(w, "got:def", "30 100")

			tm.run("send-keys", "-t", a, "C-]")
			tm.waitPane(a, "detached from "+id, "ATTACH-EXIT=0")
			assert.Contains(t, hh.mustRun("ps"), id, "a detach leaves the process running")

			attach(c)
			tm.waitPane(c, "got:def", "ctrl-] detaches")
			tm.run("send-keys", "-t", c, "quit", "Enter")
			tm.waitPane(c, "ATTACH-EXIT=3")
			tm.waitPane(w, "ATTACH-EXIT=3")
			assert.Equal(t, 3, hh.run("wait", id).code)
		})
	}
}
