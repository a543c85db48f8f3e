package integration

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/internal/testing/k8stest"
	"github.com/corralhq/corral/registry"
)

// buildK8sPlugin builds corral-backend-k8s beside the test's corral
// binary, where corral looks for the plugins that ship with it.
func buildK8sPlugin(t *testing.T) { buildK8sPluginTB(t) }

func buildK8sPluginTB(t testing.TB) {
	t.Helper()
	k8sPluginBin.once.Do(func() {
		out, err := exec.Command("go", "build", "-o", filepath.Join(packageDir, "corral-backend-k8s"), "github.com/corralhq/corral/cmd/corral-backend-k8s").CombinedOutput()
		if err != nil {
			k8sPluginBin.err = fmt.Errorf("go build cmd/corral-backend-k8s: %v\n%s", err, out)
		}
	})
	require.NoError(t, k8sPluginBin.err)
}

var k8sPluginBin struct {
	once sync.Once
	err  error
}

// k8sHome is a corral user whose daemon reads the test cluster's
// kubeconfig, with the plugin built beside corral.
func k8sHome(t *testing.T, c *k8stest.TestCluster) *daemonHome {
	bin := buildCorral(t)
	buildK8sPlugin(t)
	h := newDaemonHome(t, bin)
	h.env = append(h.env, "KUBECONFIG="+c.Kubeconfig())
	return h
}

// podHas reports whether a process whose command line holds marker runs
// in the pod, looked up with an exec of its own (not corral's).
func podHas(t *testing.T, c *k8stest.TestCluster, ns, pod, marker string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, errOut, err := c.Exec(ctx, ns, pod, "", nil, "sh", "-c", `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' <"$f" 2>/dev/null; echo; done`)
	require.NoError(t, err, "look into the pod: %s", errOut)
	return strings.Contains(out, marker)
}

// TestCorralK8s drives the daemon through the CLI on a k8s:// pod: run
// with exit codes, a timeout that kills the whole tree inside the pod,
// start + logs + kill, and readiness by port.
func TestCorralK8s(t *testing.T) {
	c := k8stest.Cluster(t)
	ns := c.Namespace(t)
	c.Pod(t, ns, "p")
	h := k8sHome(t, c)
	target := "k8s://" + ns + "/p"

	r := h.run("run", "--backend", target, "--", "sh", "-c", "echo hi from the pod; exit 3")
	require.Truef(t, r.code == 3 && r.stdout == "hi from the pod\n", "exit %d stdout %q stderr %q, want 3 and the output", r.code, r.stdout, r.stderr)

	marker := fmt.Sprintf("%d.%04d", 300+rand.IntN(600), rand.IntN(10000))
	script := fmt.Sprintf(`trap "" TERM; (setsid sleep %s &); sleep %s`, marker, marker)
	r = h.run("run", "--backend", target, "--timeout", "2s", "--grace", "1s", "--", "sh", "-c", script)
	require.Truef(t, r.code == 124, "exit %d stdout %q stderr %q, want 124", r.code, r.stdout, r.stderr)
	waitCond(t, "the timed-out tree is gone from the pod", func() bool { return !podHas(t, c, ns, "p", "sleep "+marker) })

	tick := fmt.Sprintf("tick-%08x", rand.Uint32())
	h.mustRun("start", "--name", "ticker", "--backend", target, "--", "sh", "-c", "while :; do echo "+tick+"; sleep 0.2; done")
	waitCond(t, "corral logs shows the ticker's output", func() bool { return strings.Contains(h.run("logs", "ticker").stdout, tick) })
	require.True(t, podHas(t, c, ns, "p", tick), "the ticker runs in the pod")
	// Its cost, measured inside the pod through the plugin.
	waitStats(t, h, "ticker", func(s *registry.Stats) bool { return s.Pids >= 2 && s.RSSBytes > 0 && s.CPUSeconds > 0 })
	h.mustRun("kill", "ticker")
	waitCond(t, "the ticker is gone from the pod", func() bool { return !podHas(t, c, ns, "p", tick) })

	port := 20000 + rand.IntN(20000)
	h.mustRun("start", "--name", "web", "--backend", target, "--ready-port", fmt.Sprint(port), "--",
		"sh", "-c", fmt.Sprintf("sleep 1; mkdir -p /tmp/www && echo ok >/tmp/www/index.html && exec busybox httpd -f -p 127.0.0.1:%d -h /tmp/www", port))
	w := h.run("wait", "--ready", "--timeout", "60s", "web")
	require.Equal(t, 0, w.code, "corral wait --ready: %s %s", w.stdout, w.stderr)
	h.mustRun("kill", "web")
}

// TestCorralK8sSandbox runs on a k8s-pod:// sandbox through the daemon: the
// pod is created on first use, and deleted when the daemon shuts down.
func TestCorralK8sSandbox(t *testing.T) {
	c := k8stest.Cluster(t)
	ns := c.Namespace(t)
	h := k8sHome(t, c)
	target := "k8s-pod://" + c.Image() + "?pull=never&namespace=" + ns
	r := h.run("run", "--backend", target, "--", "sh", "-c", "echo in the sandbox; cat /proc/1/cmdline | tr '\\0' ' '")
	require.Equal(t, 0, r.code, "stderr %q", r.stderr)
	assert.Contains(t, r.stdout, "in the sandbox")
	pods, err := c.Clientset().CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, pods.Items, 1, "one sandbox pod while the daemon holds the backend")

	h.mustRun("shutdown")
	waitCond(t, "the sandbox pod is deleted once the daemon shut down", func() bool {
		pods, err := c.Clientset().CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0
	})
}

// TestMCPK8s: an agent's terminal tool runs in the pod when corral mcp is
// given a k8s:// backend.
func TestMCPK8s(t *testing.T) {
	c := k8stest.Cluster(t)
	ns := c.Namespace(t)
	c.Pod(t, ns, "p")
	h := k8sHome(t, c)
	cs := mcpConnectEnv(t, h.bin, h.env, nil, "--backend", "k8s://"+ns+"/p")
	var r mcpTerminalResult
	mcpOK(t, mcpCall(t, cs, "terminal", map[string]any{"command": "echo from-mcp; hostname"}, &r))
	assert.Contains(t, r.Output, "from-mcp")
	assert.Contains(t, r.Output, "p", "the pod's hostname")
}

// BenchmarkK8sSandboxes20 starts 20 k8s-pod:// sandboxes at once through
// one daemon (a command in each) and reports how long until all ran
// (all-ran-s), and the resident memory of the daemon and its plugin
// processes with all of them open (rss-MiB). The loop then times a
// `corral ps` of the 20 backends' processes.
func BenchmarkK8sSandboxes20(b *testing.B) {
	c := k8stest.Cluster(b)
	ns := c.Namespace(b)
	h := newDaemonHome(b, buildCorral(b))
	buildK8sPluginTB(b)
	h.env = append(h.env, "KUBECONFIG="+c.Kubeconfig())
	const n = 20
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]string, n)
	for i := range n {
		wg.Go(func() {
			// A memory limit of its own gives each its own pod.
			target := fmt.Sprintf("k8s-pod://%s?pull=never&namespace=%s&memory=%dMi", c.Image(), ns, 64+i)
			r := h.run("start", "--name", fmt.Sprintf("s%d", i), "--backend", target, "--", "sleep", "600")
			if r.code != 0 {
				errs[i] = r.stderr
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	for i, e := range errs {
		require.Empty(b, e, "sandbox %d", i)
	}
	st, err := daemon.NewClient(h.socket).Status(context.Background())
	require.NoError(b, err)
	rss := treeRSS(st.PID)
	b.ReportMetric(took.Seconds(), "all-ran-s")
	b.ReportMetric(float64(rss)/(1<<20), "rss-MiB")
	for b.Loop() {
		h.mustRun("ps")
	}
	b.StopTimer()
	h.mustRun("kill", "--all")
	h.mustRun("shutdown")
	waitCondTB(b, "the sandbox pods are deleted", func() bool {
		pods, err := c.Clientset().CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0
	})
}

// treeRSS sums VmRSS of pid and its descendants.
func treeRSS(pid int) int64 {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 {
			pp, _ := strconv.Atoi(f[1])
			children[pp] = append(children[pp], p)
		}
	}
	var total int64
	stack := []int{pid}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		stack = append(stack, children[p]...)
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		if err != nil {
			continue
		}
		for l := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				total += kb << 10
			}
		}
	}
	return total
}

func waitCondTB(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		require.Falsef(t, time.Now().After(deadline), "timed out waiting for %s", what)
		time.Sleep(50 * time.Millisecond)
	}
}
