package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/daemon"
)

// requireChromium returns the headless browser's path: it skips without
// one, or fails under CORRAL_REQUIRE_BROWSER=1 (.ci/run installs
// Debian's chromium and sets it).
func requireChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	require.True(t, os.Getenv("CORRAL_REQUIRE_BROWSER") != "1", "no chromium on PATH (CORRAL_REQUIRE_BROWSER=1): apt-get install chromium")
	t.Skip("no chromium on PATH: the dashboard's browser test needs it (set CORRAL_REQUIRE_BROWSER=1 to fail instead)")
	return ""
}

// TestDashboardInBrowser drives the dashboard in headless Chromium: the
// empty page says how to start a process; a process started from the CLI
// appears with the columns and texts of corral ps; its live output shows,
// and a force kill of a TERM-ignoring tree with a setsid escapee ends all
// of it, with the row turning killed in a second tab. A running process
// that was measured has sparklines of its CPU and memory.
func TestDashboardInBrowser(t *testing.T) {
	chromium := requireChromium(t)
	h := newDaemonHome(t, buildCorral(t))
	var info daemon.DashboardInfo
	require.NoError(t, json.Unmarshal([]byte(h.mustRun("dashboard", "--json")), &info))
	base := "http://" + info.Addr + "/"
	require.Equal(t, base+"?token=", info.URL[:len(base)+len("?token=")], "the URL carries the token")

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox, // root in CI
		chromedp.WindowSize(1400, 800),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	tab1, cancelTab1 := chromedp.NewContext(allocCtx)
	defer cancelTab1()
	ctx, cancel := context.WithTimeout(tab1, 2*time.Minute)
	defer cancel()

	// Without the token: 401 and nothing of the page.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base)))
	body, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
	require.NoError(t, err)
	assert.Contains(t, body, "401 unauthorized")
	tables, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("table").length`))
	require.NoError(t, err)
	assert.Zero(t, tables, "the page leaked without the token")

	// With it: the cookie is set, the URL loses the token, the page goes live.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(info.URL), chromedp.WaitVisible(chromedp.CSS("#conn.up"))))
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	assert.Equal(t, base, loc, "the token stays in the address bar")

	poll := func(ctx context.Context, expr string) {
		t.Helper()
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(time.Minute)))
		require.NoError(t, err, "waiting for %s", expr)
	}
	// Nothing runs yet: the right pane says how to start something.
	poll(ctx, `!document.getElementById("hint").hidden && !document.getElementById("hint-start").hidden`+
		` && document.getElementById("hint").textContent.includes("corral start -- <command>")`)

	m := cliSleepMarker(t)
	id := strings.TrimSpace(h.mustRun("start", "--label", "role=victim", "--",
		"sh", "-c", "trap '' TERM; echo hello-from-cli; setsid sleep "+m+" & sleep "+m+" & wait"))
	h.mustRun("start", "--label", "role=web", "--", "sh", "-c", `printf '\033[32mserver ready\033[0m on :8080\n'; sleep 600`)
	h.mustRun("run", "--", "echo", "a finished one")
	cliRequireMarkerRunning(t, m, 2)

	row := `tr[data-id="` + id + `"]`

	// A dev server shows with what ps shows of it: its name, readiness,
	// time left, port and command as typed.
	python := realPython(t)
	port := freeTCPPort(t)
	web := strings.TrimSpace(h.mustRun("start", "--name", "web", "--ttl", "1h", "--ready-port", fmt.Sprint(port), "--",
		python, "-m", "http.server", fmt.Sprint(port), "--bind", "127.0.0.1"))
	webCell := func(key string) string { return `document.querySelector('tr[data-id="` + web + `"] td.` + key + `')` }
	poll(ctx, webCell("ports")+` && `+webCell("ports")+`.textContent === "`+fmt.Sprint(port)+`"`+
		` && `+webCell("state")+`.textContent === "running, ready"`)
	heads, err := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll("#head th")].map(th => th.textContent).join(",")`))
	require.NoError(t, err)
	assert.Equal(t, "ID,NAME,BACKEND,STATE,AGE,LEFT,PID,CPU,MEM,PORTS,COMMAND,LABELS", heads)
	cells, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](`Object.fromEntries(["name", "state", "left", "ports", "command"]`+
		`.map(k => [k, document.querySelector('tr[data-id="`+web+`"] td.' + k).textContent]))`))
	require.NoError(t, err)
	assert.Regexp(t, `^(59m\d+s|1h0m)$`, cells["left"])
	wantCommand := python + " -m http.server " + fmt.Sprint(port) + " --bind 127.0.0.1"
	assert.Equal(t, wantCommand, cells["command"], "the command as typed")
	psRow := ""
	for line := range strings.SplitSeq(h.mustRun("ps"), "\n") {
		if strings.HasPrefix(line, web) {
			psRow = line
		}
	}
	for _, k := range []string{"name", "state", "ports"} {
		assert.Contains(t, psRow, "  "+cells[k]+"  ", "ps shows the same %s as the dashboard", k)
	}
	_, psCommand, _ := strings.Cut(psRow, "  "+python)
	assert.True(t, strings.HasPrefix(wantCommand, python+strings.TrimSuffix(psCommand, "…")),
		"ps shows the same command, clipped to its width: %q", psRow)

	// The running dev server, once measured, has a sparkline of CPU and
	// one of memory beside those figures; the finished one has none.
	for _, key := range []string{"cpu", "mem"} {
		poll(ctx, `(() => { const l = document.querySelector('tr[data-id="`+web+`"] td.`+key+` svg.spark polyline');`+
			` return !!l && l.getAttribute("points").split(" ").length >= 2; })()`)
	}
	finished, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("tr.final svg.spark").length`))
	require.NoError(t, err)
	assert.Zero(t, finished, "no sparkline for a process whose tree has ended")

	// Processes but none chosen: the right pane says what choosing does.
	poll(ctx, `!document.getElementById("hint-choose").hidden`+
		` && document.getElementById("hint").textContent.includes("Choose a process on the left")`)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS(row)),
		chromedp.Click(chromedp.CSS(row)),
		chromedp.WaitVisible(chromedp.CSS("#detail"))))
	poll(ctx, `document.getElementById("output").textContent.includes("hello-from-cli")`)
	poll(ctx, `document.getElementById("hint").hidden`)

	// A second tab of the same browser: the cookie is enough.
	tab2, cancelTab2 := chromedp.NewContext(tab1)
	defer cancelTab2()
	ctx2, cancel2 := context.WithTimeout(tab2, 2*time.Minute)
	defer cancel2()
	require.NoError(t, chromedp.Do(ctx2, chromedp.Navigate(base), chromedp.WaitVisible(chromedp.CSS(row))))

	shot := filepath.Join(t.TempDir(), "dashboard.png")
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(shot, png, 0o644))
	if dir := os.Getenv("CORRAL_SCREENSHOT_DIR"); dir != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "dashboard.png"), png, 0o644))
	}
	t.Logf("screenshot of the dashboard with three processes: %s (%d bytes)", shot, len(png))

	type result struct {
		Type      string `json:"type"`
		SessionID string `json:"sessionId"`
		Success   bool   `json:"success"`
		Forced    bool   `json:"forced"`
		Message   string `json:"message"`
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#b-force"))))
	poll(ctx, `!!window.corralLastResult && window.corralLastResult.type === "force_kill_result"`)
	res, err := chromedp.Run(ctx, chromedp.Evaluate[result](`window.corralLastResult`))
	require.NoError(t, err)
	assert.Equal(t, id, res.SessionID)
	assert.True(t, res.Success, res.Message)
	assert.True(t, res.Forced, "forced: SIGKILL was needed")
	cliRequireMarkerGone(t, m)

	poll(ctx2, `(document.querySelector('`+row+` td.state') || {}).textContent === "killed (SIGKILL)"`)
}

// realPython returns the path of the python3 interpreter itself, not of a
// version manager's shim, which may not work under the daemon's HOME.
func realPython(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not found: it is the dev server of this test (apt-get install python3)")
	}
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	require.NoError(t, err)
	return strings.TrimSpace(string(out))
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
