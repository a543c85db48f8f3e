package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/envtest"
	"github.com/corralhq/corral/env/nohup"
	"github.com/corralhq/corral/internal/testing/k8stest"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// openEnv opens target as the plugin does, on the test cluster.
func openEnv(t *testing.T, kubeconfig, target string, opts Options) (env.Environment, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts.Kubeconfig = kubeconfig
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	tr, eo, err := Open(ctx, target, opts)
	if err != nil {
		return nil, err
	}
	return nohup.New(tr, eo)
}

// groupPods hands each group of the suite a pod of its own (its cases
// share it, as the processes of many callers share one pod), and each load
// case one of its own. They are created up front, on the top-level test:
// a subtest's failure must not end the pod its group shares.
type groupPods map[string]string

func newGroupPods(t *testing.T, c *k8stest.TestCluster, ns string) groupPods {
	g := groupPods{}
	for _, name := range envtest.Cases() {
		key := podKey(name)
		if _, ok := g[key]; !ok {
			pod := fmt.Sprintf("p%d", len(g))
			c.Pod(t, ns, pod)
			g[key] = "k8s://" + ns + "/" + pod
		}
	}
	return g
}

// podKey maps a case ("Group/Case") to its pod: the group's, or its own
// for a load case.
func podKey(name string) string {
	if envtest.IsLoadCase(name) {
		return name
	}
	group, _, _ := strings.Cut(name, "/")
	return group
}

// target is the pod of the subtest named TestX/MODE/GROUP/CASE.
func (g groupPods) target(t *testing.T) string {
	parts := strings.SplitN(t.Name(), "/", 4)
	require.Len(t, parts, 4, "a case of the suite")
	target, ok := g[podKey(parts[2]+"/"+parts[3])]
	require.True(t, ok, "no pod for %s", t.Name())
	return target
}

// podSignalBaseline is the conformance suite's SignalBaseline on the
// cluster: the ignored and blocked signals of a plain exec into a pod of
// it, the most a command may inherit. (A cluster started from make
// ignores signals 32 and 33 in every container: GNU make ignores them in
// its children, the ignore is inherited through exec, and glibc lets no
// program undo it.)
func podSignalBaseline(t *testing.T, c *k8stest.TestCluster, ns string) func(t *testing.T) envtest.SignalMasks {
	c.Pod(t, ns, "baseline")
	return func(t *testing.T) envtest.SignalMasks {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, errOut, err := c.Exec(ctx, ns, "baseline", "", nil, "/bin/sh", "-c", "grep -E '^Sig(Ign|Blk):' /proc/self/status")
		require.NoError(t, err, "a plain exec for the signal baseline: %s", errOut)
		m, err := envtest.ParseSignalMasks(out)
		require.NoError(t, err)
		return m
	}
}

// TestConformancePod runs the env conformance suite on k8s:// targets:
// pods the test creates, reached through the API server's exec.
func TestConformancePod(t *testing.T) {
	t.Parallel() // beside TestConformanceSandbox: both wait on the cluster, not the CPU
	c := k8stest.Cluster(t)
	ns := c.Namespace(t)
	pods := newGroupPods(t, c, ns)
	baseline := podSignalBaseline(t, c, ns)
	t.Run("residents", func(t *testing.T) {
		envtest.Run(t, envtest.Config{
			Timeout:        4 * time.Minute,
			SignalBaseline: baseline,
			PTY:            true, // the test image has util-linux script
			New: func(t *testing.T) env.Environment {
				e, err := openEnv(t, c.Kubeconfig(), pods.target(t), Options{})
				require.NoError(t, err, "Open")
				return e
			},
		})
	})
}

// TestConformanceSandbox runs the suite on k8s-pod:// targets (the cases
// that a sandbox could change, see Skip). The cases
// of a group share a sandbox pod (one owner per group, as the processes of
// many callers share one sandbox) and each load case has its own; the pods
// persist across Close, so that re-attach finds them, and go with the
// namespace. A pod per case cost a hundred pod starts and deletions, most
// of the package's CI time; TestSandboxLifecycle checks that a sandbox is
// deleted on Close.
func TestConformanceSandbox(t *testing.T) {
	t.Parallel()
	c := k8stest.Cluster(t)
	ns := c.Namespace(t)
	owner := "test-" + strings.TrimPrefix(ns, "corral-test-")
	baseline := podSignalBaseline(t, c, ns)
	envtest.Run(t, envtest.Config{
		Timeout:        4 * time.Minute,
		SignalBaseline: baseline,
		PTY:            true,
		// The engine and the transport are k8s://'s, whose suite runs
		// every case: here only what a sandbox pod could change (exit,
		// output, stdin, spec, lifecycle). Both suites whole took 880 s of
		// a loaded CI run; TestSandboxLifecycle and the integration tests
		// cover creation, deletion and re-attach after a daemon's death.
		Skip: envtest.TransportSkip(),
		New: func(t *testing.T) env.Environment {
			parts := strings.SplitN(t.Name(), "/", 3)
			require.Len(t, parts, 3, "a case of the suite")
			key := podKey(parts[1] + "/" + parts[2])
			e, err := openEnv(t, c.Kubeconfig(), "k8s-pod://"+c.Image()+"?pull=never&persist=true&namespace="+ns, Options{Owner: owner + "/" + key})
			require.NoError(t, err, "Open")
			return e
		},
	})
}

// TestSandboxLifecycle: a k8s-pod:// sandbox shares its process namespace
// (the pause process is PID 1), carries its owner's labels, is found again
// by the same owner, and is gone from the cluster once Close returns.
func TestSandboxLifecycle(t *testing.T) {
	c := k8stest.Cluster(t)
	ns := c.Namespace(t)
	target := "k8s-pod://" + c.Image() + "?pull=never&namespace=" + ns + "&cpu=200m&memory=64Mi"
	e, err := openEnv(t, c.Kubeconfig(), target, Options{Owner: "owner-a"})
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			_ = e.Close()
		}
	}()
	ctx := context.Background()
	pods, err := c.Clientset().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: LabelManaged + "=true"})
	require.NoError(t, err)
	require.Len(t, pods.Items, 1)
	pod := pods.Items[0]
	assert.Equal(t, ownerHash("owner-a"), pod.Labels[LabelOwner])
	assert.True(t, *pod.Spec.ShareProcessNamespace)
	assert.NotEmpty(t, pod.Spec.NodeName, "scheduled by the scheduler (corral sets no nodeName)")
	assert.Equal(t, "200m", pod.Spec.Containers[0].Resources.Limits.Cpu().String())

	out := run(t, e, "cat /proc/1/cmdline | tr '\\0' ' '; echo")
	assert.NotContains(t, out, "sleep 3600", "PID 1 is the pause process, which reaps orphans, not the keep-alive loop")

	// Another owner gets a pod of its own.
	e2, err := openEnv(t, c.Kubeconfig(), target, Options{Owner: "owner-b"})
	require.NoError(t, err)
	require.NoError(t, e2.Close())

	require.NoError(t, e.Close())
	closed = true
	_, err = c.Clientset().CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the pod is gone once Close returned: %v", err)
	left, err := c.Clientset().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, left.Items, "no sandbox pod is left")
}

// run starts script in e, waits for it and returns its output.
func run(t *testing.T, e env.Environment, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := e.Start(ctx, env.Spec{Command: script})
	require.NoError(t, err)
	st, err := p.Wait(ctx)
	require.NoError(t, err)
	r, err := p.Output(ctx, 0)
	require.NoError(t, err)
	defer r.Close()
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	require.True(t, st.Success(), "status %v, output %q", st, b)
	return string(b)
}

// TestSandboxCannotStart: a pod that cannot run is reported within its
// bound with the reason from its status, and deleted.
func TestSandboxCannotStart(t *testing.T) {
	c := k8stest.Cluster(t)
	ns := c.Namespace(t)
	for _, tc := range []struct{ name, target, want string }{
		{"image missing", "k8s-pod://corral-no-such-image:0?pull=never&namespace=" + ns, "ErrImageNeverPull"},
		{"unschedulable", "k8s-pod://" + c.Image() + "?pull=never&start-timeout=4s&node-selector=corral-test/none=x&namespace=" + ns, "Unschedulable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := openEnv(t, c.Kubeconfig(), tc.target, Options{Owner: "cannot-start"})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Less(t, time.Since(start), 60*time.Second)
			left, lerr := c.Clientset().CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
			require.NoError(t, lerr)
			assert.Empty(t, left.Items, "the pod that could not start is deleted")
		})
	}
}

// TestForbidden: a user without pods/exec is told which permissions it
// lacks, in which namespace, at Open.
func TestForbidden(t *testing.T) {
	c := k8stest.Cluster(t)
	ns := c.Namespace(t)
	c.Pod(t, ns, "p")
	kc := c.LimitedKubeconfig(t, ns, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}}})
	_, err := openEnv(t, kc, "k8s://"+ns+"/p", Options{})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrForbidden)
	assert.Contains(t, err.Error(), "create pods/exec")
	assert.Contains(t, err.Error(), "namespace "+ns)
}

// TestPodDeletedUnderProcess: deleting the pod under a running process
// makes its calls fail with env.ErrSandboxGone, promptly.
func TestPodDeletedUnderProcess(t *testing.T) {
	c := k8stest.Cluster(t)
	ns := c.Namespace(t)
	c.Pod(t, ns, "p")
	e, err := openEnv(t, c.Kubeconfig(), "k8s://"+ns+"/p", Options{})
	require.NoError(t, err)
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := e.Start(ctx, env.Spec{Command: "sleep 300"})
	require.NoError(t, err)
	zero := int64(0)
	require.NoError(t, c.Clientset().CoreV1().Pods(ns).Delete(ctx, "p", metav1.DeleteOptions{GracePeriodSeconds: &zero}))
	_, err = p.Wait(ctx)
	require.Error(t, err)
	assert.True(t, errors.Is(err, env.ErrSandboxGone), "%v", err)
}

// TestNoPod: a target whose pod does not exist says so.
func TestNoPod(t *testing.T) {
	c := k8stest.Cluster(t)
	ns := c.Namespace(t)
	_, err := openEnv(t, c.Kubeconfig(), "k8s://"+ns+"/nobody", Options{})
	require.Error(t, err)
	assert.ErrorIs(t, err, env.ErrSandboxGone)
	assert.Contains(t, err.Error(), "no pod nobody in namespace "+ns)
}
