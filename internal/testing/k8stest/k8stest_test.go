package k8stest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/exec"

	"github.com/corralhq/corral/internal/testing/k8stest"
)

// TestCluster exercises the whole harness on the real cluster: a
// namespace, a Ready pod from the test image whose PID 1 is the pause
// program, exec through the API server, a limited user allowed exactly
// what its Role grants, and the cleanups (checked in a subtest's parent).
func TestCluster(t *testing.T) {
	c := k8stest.Cluster(t)
	cs := c.Clientset()
	require.FileExists(t, c.Kubeconfig())
	require.NotEmpty(t, c.Image())

	var ns, pod string
	t.Run("use", func(t *testing.T) {
		ns = c.Namespace(t)
		require.True(t, strings.HasPrefix(ns, "corral-test-"), ns)
		p := c.Pod(t, ns, "keepalive")
		pod = p.Name
		require.Equal(t, corev1.PodRunning, p.Status.Phase)
		require.Equal(t, "localhost", p.Spec.NodeName, "scheduled by kube-scheduler onto the one node")
		require.NotEmpty(t, p.Status.PodIP)

		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		start := time.Now()
		out, errOut, err := c.Exec(ctx, ns, pod, "main", nil, "true")
		require.NoError(t, err, "exec true: stderr %q", errOut)
		require.Empty(t, out)
		t.Logf("exec true through client-go remotecommand: %v", time.Since(start))

		// The pause program is PID 1 (shareProcessNamespace), the keep-alive
		// runs beside it, and stdin reaches the command.
		out, errOut, err = c.Exec(ctx, ns, pod, "main", strings.NewReader("from stdin"), "sh", "-c", "cat /proc/1/comm; cat")
		require.NoError(t, err, "stderr %q", errOut)
		require.Equal(t, "pause\nfrom stdin", out)

		_, _, err = c.Exec(ctx, ns, pod, "main", nil, "sh", "-c", "exit 3")
		var exitErr exec.CodeExitError
		require.True(t, errors.As(err, &exitErr), "exit 3 gives a CodeExitError, got %v", err)
		require.Equal(t, 3, exitErr.Code)

		// A user with a Role that allows get on pods: it can read the pod,
		// and is refused the list it was not granted, and exec.
		kc := c.LimitedKubeconfig(t, ns, []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"},
		}})
		cfg, err := clientcmd.BuildConfigFromFlags("", kc)
		require.NoError(t, err)
		limited, err := kubernetes.NewForConfig(cfg)
		require.NoError(t, err)
		_, err = limited.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		require.NoError(t, err)
		_, err = limited.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		require.True(t, apierrors.IsForbidden(err), "list without a grant: %v", err)
		raw, err := clientcmd.LoadFromFile(kc)
		require.NoError(t, err)
		require.Equal(t, ns, raw.Contexts[raw.CurrentContext].Namespace)
	})

	// The cleanups have run: pod and namespace are gone.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NotEmpty(t, ns)
	_, err := cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "pod after cleanup: %v", err)
	_, err = cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "namespace after cleanup: %v", err)
}
