package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/registry"
)

// The fault suite's input part (issue #28, items 6 and 10): oversized and
// malformed input sent to a real daemon, and output far larger than what
// is kept. Each test checks the suite's promise: every call returns within
// its bound, errors are short and never repeat their input, and nothing of
// corral is left running.

// chaosHeredoc is a command of about size bytes that writes a file with a
// heredoc, as agents do, and prints the file's size: the command's text
// must reach the shell whole. Its lines carry word, which no error may
// repeat.
func chaosHeredoc(size int, word string) (command string, wantOut string) {
	line := strings.Repeat(word+" ", 99/(len(word)+1)+1)[:99] + "\n"
	n := size / 100
	return "f=$(mktemp) && cat > \"$f\" <<'CHAOS_EOF'\n" + strings.Repeat(line, n) + "CHAOS_EOF\nwc -c < \"$f\" | tr -d ' '; rm -f \"$f\"",
		strconv.Itoa(n*100) + "\n"
}

// chaosDaemon starts an isolated daemon (extra: serve flags) and returns
// its home and a client. stop shuts it down with --kill-all and waits for
// it to exit, so that a leftover check that follows sees only what corral
// failed to end.
func chaosDaemon(t *testing.T, envs []string, extra ...string) (h *daemonHome, c *daemon.Client, stop func()) {
	t.Helper()
	h = newDaemonHome(t, buildCorral(t))
	h.env = append(h.env, envs...)
	h.startServe(extra...)
	c = daemon.NewClient(h.socket)
	stopped := false
	stop = func() {
		t.Helper()
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := c.Shutdown(ctx, true)
		assert.NoError(t, err, "shutdown --kill-all")
		c.CloseIdle()
		done := make(chan struct{})
		go func() { h.serve.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			assert.Fail(t, "the daemon did not exit within a minute of its shutdown")
			h.serve.Process.Kill()
			<-done
		}
		h.serve = nil
	}
	t.Cleanup(stop)
	return h, c, stop
}

// TestChaosInputLongCommand: commands of 200 KB (over Linux's 128 KiB
// argument limit) and 4 MB run through the daemon on the local backend and
// in a docker container, each within its bound, with the whole command
// reaching the shell; what the daemon records of them stays small.
func TestChaosInputLongCommand(t *testing.T) {
	since := time.Now()
	backends := []string{"local"}
	if !testing.Short() {
		cli := requireDocker(t)
		backends = append(backends, "docker://"+startUserContainer(t, cli))
	}
	h, c, stop := chaosDaemon(t, nil)
	for _, backend := range backends {
		for _, size := range []int{200 << 10, 4 << 20} {
			command, want := chaosHeredoc(size, "chaoslong")
			what := fmt.Sprintf("a %d KiB command on %s", size>>10, backend)
			var res registry.RunResult
			var err error
			chaosWithin(t, what, time.Minute, func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				res, err = c.Run(ctx, registry.RunOptions{StartOptions: registry.StartOptions{Backend: backend, Command: command,
					Labels: map[string]string{"chaos": "long"}}, Timeout: time.Minute})
			})
			if err != nil {
				chaosShortError(t, err.Error(), command[100:200])
				require.FailNow(t, fmt.Sprintf("%s: %.300v", what, err))
			}
			assert.Truef(t, res.State == registry.StateExited && res.Status != nil && res.Status.Code == 0 && string(res.Output) == want, "%s: %s %v, output %.100q; want exit 0, output %q", what, res.State, res.Status, res.Output, want)
			assert.Truef(t, len(res.Command) <= registry.MaxRecordedCommand, "%s: the result records a %d-byte command", what, len(res.Command))
		}
	}
	stop()
	chaosNoLeftoversWhere(t, since, 30*time.Second, homeScope(h))
}

// rss is the resident memory of process pid, in bytes.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	require.FailNow(t, "no VmRSS")
	return 0
}

// TestChaosInputFailedStarts: starts of 7 MB commands that fail (a
// directory that does not exist) answer within their bound with a short
// error that does not repeat the command, and cost the daemon neither
// memory per failure nor state file size (each added about 170 MiB and
// state.json reached 88 MB). A start with a malformed duration beside a
// long command is refused as briefly.
func TestChaosInputFailedStarts(t *testing.T) {
	since := time.Now()
	h, c, stop := chaosDaemon(t, nil)
	pid := h.serve.Process.Pid
	command, _ := chaosHeredoc(7<<20, "chaosfail")
	fail := func(i int) {
		var err error
		chaosWithin(t, fmt.Sprintf("failed 7 MB start #%d", i), 30*time.Second, func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err = c.Start(ctx, registry.StartOptions{Command: command, Dir: "/nonexistent/chaos"})
		})
		require.Error(t, err, "a start in a directory that does not exist succeeded")
		if i == 1 {
			t.Logf("chaos: the error: %s", err)
		}
		chaosShortError(t, err.Error(), command[100:200])
	}
	fail(1)
	before := rss(t, pid)
	const n = 8
	for i := 2; i <= n+1; i++ {
		fail(i)
	}
	after := rss(t, pid)
	t.Logf("chaos: daemon RSS %d MiB after one failed 7 MB start, %d MiB after %d more", before>>20, after>>20, n)
	// A request's own buffers come and go (a few times the command); what
	// must not happen is growth per failure.
	grown := after - before
	assert.Truef(t, grown <= 96<<20, "chaos: %d failed 7 MB starts grew the daemon by %d MiB", n, grown>>20)
	st, err := os.Stat(filepath.Join(h.home, ".local", "state", "corral", "state.json"))
	require.NoError(t, err)
	t.Logf("chaos: state.json is %d bytes with %d failed 7 MB starts", st.Size(), n+1)
	if st.Size() > 256<<10 {
		assert.Fail(t, fmt.Sprintf("chaos: state.json is %d bytes after %d failed starts", st.Size(), n+1))
	}
	list, err := c.List(context.Background(), registry.ListOptions{All: true})
	require.NoError(t, err)
	for _, in := range list {
		assert.Truef(t, len(in.Command) <= registry.MaxRecordedCommand && len(in.Reason) <= 1100, "chaos: %s records a %d-byte command and a %d-byte reason", in.ID, len(in.Command), len(in.Reason))
	}

	// A malformed duration beside a long command: 400, briefly.
	body, _ := json.Marshal(map[string]any{"command": command, "ttl": true})
	status, msg := chaosRaw(t, h.socket, "POST", "/v1/processes", string(body))
	assert.Truef(t, status == http.StatusBadRequest, "chaos: ttl true: %d %.200s", status, msg)
	chaosShortError(t, msg, command[100:200])
	stop()
	chaosNoLeftoversWhere(t, since, 30*time.Second, homeScope(h))
}

// chaosRaw sends one request with a literal body and returns the status
// and the body (the error message when it is an ErrorBody).
func chaosRaw(t *testing.T, socket, method, path, body string) (int, string) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://corral"+path, rd)
	require.NoError(t, err)
	resp, err := hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var eb daemon.ErrorBody
	if json.Unmarshal(b, &eb) == nil && eb.Error != "" {
		return resp.StatusCode, eb.Error
	}
	return resp.StatusCode, string(b)
}

// TestChaosInputMalformed: a duration as a number is seconds ("ttl": 3600
// was 3600 ns, which killed the process at once), anything else is a 400;
// an unknown backend is a 4xx (it was a 500); a body that never finishes
// is cut within the body deadline (it held its connection for ever).
func TestChaosInputMalformed(t *testing.T) {
	since := time.Now()
	h, _, stop := chaosDaemon(t, nil)

	status, msg := chaosRaw(t, h.socket, "POST", "/v1/processes", `{"command":"sleep 600","ttl":3600,"labels":{"chaos":"ttl"}}`)
	require.Truef(t, status == http.StatusCreated, "chaos: ttl 3600: %d %s", status, msg)
	var in registry.Info
	if err := json.Unmarshal([]byte(msg), &in); err != nil || in.TTL.D() != time.Hour || in.State != registry.StateRunning {
		assert.Fail(t, fmt.Sprintf("chaos: ttl 3600 started %s with ttl %s (%v); want running, 1h", in.State, in.TTL, err))
	}
	// The leftover check sees this daemon's processes: its local shim
	// runs the sleep.
	left := chaosLeftoversWhere(since, homeScope(h))
	assert.True(t, len(left) != 0, "chaos: the leftover check sees no process of this daemon while one runs")
	for _, v := range []string{`true`, `-5`, `{"h":1}`, `"soon"`} {
		status, msg := chaosRaw(t, h.socket, "POST", "/v1/processes", `{"command":"true","ttl":`+v+`}`)
		assert.Truef(t, status == http.StatusBadRequest, "chaos: ttl %s: %d %s; want 400", v, status, msg)
		chaosShortError(t, msg)
	}

	chaosWithin(t, "ports of an unknown backend", 5*time.Second, func() {
		status, msg = chaosRaw(t, h.socket, "GET", "/v1/ports?backend=nosuch://x", "")
	})
	assert.Truef(t, status >= 400 && status < 500, "chaos: ports of nosuch://x answered %d: %s", status, msg)
	chaosShortError(t, msg)

	conn, err := net.Dial("unix", h.socket)
	require.NoError(t, err)
	defer conn.Close()
	chaosWithin(t, "a body that never finishes", daemon.BodyTimeout+10*time.Second, func() {
		fmt.Fprintf(conn, "POST /v1/processes HTTP/1.1\r\nHost: corral\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"command\":\"")
		conn.SetReadDeadline(time.Now().Add(time.Minute))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			assert.Fail(t, fmt.Sprintf("chaos: unfinished body: no answer: %v", err))
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Truef(t, resp.StatusCode == http.StatusBadRequest, "chaos: unfinished body answered %d %s", resp.StatusCode, b)
		chaosShortError(t, string(b))
		if _, err := conn.Read(make([]byte, 1)); err == nil {
			assert.Fail(t, "chaos: the connection of an unfinished body stayed open")
		}
	})
	stop()
	chaosNoLeftoversWhere(t, since, 30*time.Second, homeScope(h))
}

// allocated is what path takes on disk.
func allocated(path string) int64 {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return 0
	}
	return st.Blocks * 512
}

// TestChaosInputLogOnDisk: a foreground run that prints 208 MB in one line
// leaves a log on disk within the bound (it kept all of it, for 30
// minutes, foreground runs included), and a follow of a fast writer prints
// a handful of notices of omitted output, not one per chunk (about 170).
func TestChaosInputLogOnDisk(t *testing.T) {
	since := time.Now()
	const bound = 8 << 20
	h, _, stop := chaosDaemon(t, []string{"CORRAL_LOG_MAX=8MiB"})
	const total = 208 << 20
	var r cliResult
	chaosWithin(t, "a run of 208 MB of output", 2*time.Minute, func() {
		r = h.run("run", "--", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' x; echo", total))
	})
	require.Truef(t, r.code == 0 && len(r.stdout) == total+1, "chaos: run: exit %d, %d bytes out, stderr %.300q", r.code, len(r.stdout), r.stderr)
	logs, _ := filepath.Glob(filepath.Join(h.home, ".local", "state", "corral", "local", "*", "log"))
	require.True(t, len(logs) != 0, "chaos: no log on disk: was the run detached?")
	for _, l := range logs {
		used := allocated(l)
		t.Logf("chaos: the log of a 208 MB run takes %d KiB on disk (bound %d KiB)", used>>10, bound>>10)
		assert.Truef(t, used <= bound+(2<<20), "chaos: %s takes %d MiB on disk, over the bound of %d MiB", l, used>>20, bound>>20)
		_, err := os.Stat(filepath.Join(filepath.Dir(l), "omitted"))
		assert.NoErrorf(t, err, "chaos: no record of the omitted range beside %s", l)
	}

	// logs -f on a writer faster than the reader.
	id := strings.TrimSpace(h.mustRun("start", "--", "head -c 100000000 /dev/zero | tr '\\0' y; sleep 0.5"))
	r = h.run("logs", "-f", id)
	notices := strings.Count(r.stderr, "omitted")
	t.Logf("chaos: logs -f of a fast writer printed %d notices of omitted output", notices)
	assert.Truef(t, notices <= 10, "chaos: logs -f printed %d notices of omitted output:\n%.500s", notices, r.stderr)
	stop()
	chaosNoLeftoversWhere(t, since, 30*time.Second, homeScope(h))
}
