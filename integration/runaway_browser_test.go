package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/daemon"
)

// TestRunawayInBrowser: corral serve's --runaway-memory applies to a
// process started without thresholds; once its memory grows past it, the
// dashboard marks its row and corral events names what was seen, while a
// quiet sibling stays unmarked.
func TestRunawayInBrowser(t *testing.T) {
	chromium := requireChromium(t)
	h := newDaemonHome(t, buildCorral(t))
	h.startServe("--runaway-memory", "32M", "--runaway-for", "1m")
	python := realPython(t)
	grower := strings.TrimSpace(h.mustRun("start", "--", python, "-c",
		`import time; time.sleep(2); x = b"x" * (96 << 20); time.sleep(600)`))
	quiet := strings.TrimSpace(h.mustRun("start", "--", "sleep", "600"))

	var info daemon.DashboardInfo
	require.NoError(t, json.Unmarshal([]byte(h.mustRun("dashboard", "--json")), &info))
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	tab, cancelTab := chromedp.NewContext(allocCtx)
	defer cancelTab()
	ctx, cancel := context.WithTimeout(tab, 2*time.Minute)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(info.URL), chromedp.WaitVisible(chromedp.CSS("#conn.up"))))

	badge := func(id string) string {
		return `document.querySelector('tr[data-id="` + id + `"] td.state .badge.runaway')`
	}
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](badge(grower)+` !== null`, chromedp.WithPollingTimeout(time.Minute)))
	require.NoError(t, err, "the grower's row is marked runaway")
	marked, err := chromedp.Run(ctx, chromedp.Evaluate[bool](badge(quiet)+` !== null`))
	require.NoError(t, err)
	assert.False(t, marked, "the quiet sibling is not marked")

	events := h.mustRun("events")
	assert.Contains(t, events, "runaway")
	assert.Contains(t, events, grower+" grew from ")
	assert.NotContains(t, events, quiet+" grew")
}
