package integration

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// topRow is what corral top --once --json says of a process.
type topRow struct {
	ID           string   `json:"id"`
	CPUPercent   *float64 `json:"cpu_percent"`
	RSSBytes     *int64   `json:"rss_bytes"`
	PeakRSSBytes *int64   `json:"peak_rss_bytes"`
	Pids         *int     `json:"pids"`
	State        string   `json:"state"`
}

// TestTopThroughTheCLI: corral top on the local backend puts a busy loop
// first by CPU, beside a sleep, and a tree holding 64 MiB first by memory;
// its text frame has the columns.
func TestTopThroughTheCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the corral binary")
	}
	bin := buildCorral(t)
	h := newDaemonHome(t, bin)
	idle := strings.TrimSpace(h.mustRun("start", "--", "sleep 600"))
	busy := strings.TrimSpace(h.mustRun("start", "--", "while :; do :; done"))
	defer h.mustRun("kill", "--force", idle, busy)

	rows := waitTop(t, h, "cpu", func(rows []topRow) bool {
		return len(rows) >= 2 && rows[0].ID == busy && rows[0].CPUPercent != nil && *rows[0].CPUPercent > 0
	})
	assert.Equal(t, "running", rows[0].State)
	require.NotNil(t, rows[0].Pids)
	assert.GreaterOrEqual(t, *rows[0].Pids, 1)

	mem := strings.TrimSpace(h.mustRun("start", "--", `v=$(head -c 67108864 /dev/zero | tr '\0' a); sleep 600; : "${#v}"`))
	defer h.mustRun("kill", "--force", mem)
	rows = waitTop(t, h, "mem", func(rows []topRow) bool {
		return len(rows) >= 3 && rows[0].ID == mem && rows[0].RSSBytes != nil && *rows[0].RSSBytes >= 60<<20
	})
	require.NotNil(t, rows[0].PeakRSSBytes)
	assert.GreaterOrEqual(t, *rows[0].PeakRSSBytes, *rows[0].RSSBytes)

	frame := h.mustRun("top", "--once", "--sort", "mem")
	lines := strings.Split(strings.TrimSpace(frame), "\n")
	require.GreaterOrEqual(t, len(lines), 4, frame)
	assert.Equal(t, []string{"ID", "NAME", "BACKEND", "CPU%", "MEM", "PEAK", "PIDS", "LIMITS", "STATE", "COMMAND"}, strings.Fields(lines[0]))
	assert.True(t, strings.HasPrefix(lines[1], mem+" "), "the 64 MiB tree first:\n%s", frame)
	assert.NotContains(t, frame, "\x1b", "no escape sequences on a pipe")

	// Live on a pipe: frame after frame, plain, until Ctrl-C (exit 0).
	cmd := exec.Command(h.bin, "top", "--interval", "200ms")
	cmd.Env = h.env
	var out cliTermBuffer
	var errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Start())
	waitCond(t, "three frames of corral top", func() bool { return strings.Count(out.String(), "running, by cpu") >= 3 })
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	require.NoError(t, cmd.Wait(), "corral top after Ctrl-C: %s", errOut.String())
	assert.NotContains(t, out.String(), "\x1b")
	assert.Contains(t, out.String(), "\n\n", "frames apart")

	topOnTerminal(t, h, mem)
}

// topOnTerminal runs corral top on a terminal of its own, 60 columns
// wide: each frame clears the screen, m sorts by memory (the 64 MiB tree
// mem first), q quits with the terminal restored.
func topOnTerminal(t *testing.T, h *daemonHome, mem string) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal available: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	require.NoError(t, pty.Setsize(ptmx, &pty.Winsize{Rows: 30, Cols: 60}))
	cmd := exec.Command(h.bin, "top", "--interval", "500ms")
	cmd.Env = h.env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	require.NoError(t, cmd.Start())
	var out cliTermBuffer
	copied := make(chan struct{})
	go func() { defer close(copied); _, _ = io.Copy(&out, ptmx) }()
	waitDone := make(chan struct{})
	go func() { _ = cmd.Wait(); close(waitDone) }()
	defer func() {
		select {
		case <-waitDone:
		default:
			_ = cmd.Process.Kill()
			<-waitDone
		}
	}()

	waitCond(t, "a frame on the terminal", func() bool { return strings.Contains(out.String(), "by cpu") })
	_, err = ptmx.Write([]byte("m"))
	require.NoError(t, err)
	// The last frame by memory lists mem first.
	waitCond(t, "a frame by memory with "+mem+" first", func() bool {
		s := out.String()
		i := strings.LastIndex(s, "by mem")
		if i < 0 {
			return false
		}
		lines := strings.Split(s[i:], "\n")
		return len(lines) > 2 && strings.HasPrefix(lines[2], mem)
	})
	_, err = ptmx.Write([]byte("q"))
	require.NoError(t, err)
	select {
	case <-waitDone:
	case <-time.After(30 * time.Second):
		require.FailNow(t, "corral top did not quit on q")
	}
	termios, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	require.NoError(t, err)
	assert.True(t, termios.Lflag&unix.ICANON != 0 && termios.Lflag&unix.ECHO != 0, "terminal restored (lflag %#x)", termios.Lflag)
	tty.Close()
	<-copied
	assert.Equal(t, 0, cmd.ProcessState.ExitCode())
	got := out.String()
	assert.Contains(t, got, "\x1b[H\x1b[2J", "each frame clears the screen")
	for _, l := range strings.Split(strings.ReplaceAll(got, "\x1b[H\x1b[2J", "\n"), "\n") {
		l = strings.TrimSuffix(l, "\r")
		assert.LessOrEqual(t, len([]rune(l)), 60, "clipped to the terminal: %q", l)
	}
}

// waitTop polls corral top --once --json --sort by until ok holds for
// its rows (20 s at most, as waitStats: a loaded machine is given room).
func waitTop(t *testing.T, h *daemonHome, by string, ok func([]topRow) bool) []topRow {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for polls := 1; ; polls++ {
		out := h.mustRun("top", "--once", "--json", "--sort", by)
		var rows []topRow
		require.NoError(t, json.Unmarshal([]byte(out), &rows), "corral top --once --json: %s", out)
		if ok(rows) {
			t.Logf("--sort %s: there after %d polls", by, polls)
			return rows
		}
		require.Falsef(t, time.Now().After(deadline), "corral top --sort %s never got there after %d polls: %s", by, polls, out)
		time.Sleep(200 * time.Millisecond)
	}
}
