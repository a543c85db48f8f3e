package k8s

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/nohup"
)

// stateDir is where the engine keeps its per-process state in a pod: /tmp
// is writable in nearly every image.
const stateDir = "/tmp/.corral"

// outputChunk is the most log bytes one poll moves; maxFollows bounds the
// follows (one exec each) per pod.
const (
	outputChunk = 4 << 20
	maxFollows  = 64
	residents   = 4
)

// Options configure Open.
type Options struct {
	// Owner owns the sandbox pods Open creates (the plugin passes
	// sdk.Owner(), the daemon's identity); "" means uid@hostname.
	Owner string
	// Kubeconfig is the kubeconfig file to read; "" means $KUBECONFIG or
	// ~/.kube/config, as kubectl reads them.
	Kubeconfig string
	Logger     *slog.Logger
}

// Open connects to the cluster of target's context and returns the
// Transport of its pod (k8s://), or of a sandbox pod it finds again or
// creates (k8s-pod://), and the engine's options for it: the engine's
// OnClose deletes a sandbox pod and checks that it is gone.
func Open(ctx context.Context, target string, opts Options) (nohup.Transport, nohup.Options, error) {
	t, err := ParseTarget(target)
	if err != nil {
		return nil, nohup.Options{}, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	c, err := connect(opts.Kubeconfig, t.Context)
	if err != nil {
		return nil, nohup.Options{}, err
	}
	eo := nohup.Options{
		Name: target,
		LimitsNote: "per-process limits inside a pod need a writable cgroup, which corral does not use yet; " +
			"limit the pod itself: k8s-pod://IMAGE?memory=2Gi&cpus=1.5",
		BaseDir:      stateDir,
		ChunkSize:    outputChunk,
		Residents:    residents,
		MaxLongPolls: maxFollows,
		Logger:       log,
	}
	if t.Pod != "" {
		tr, err := openPod(ctx, c, t)
		if err != nil {
			return nil, nohup.Options{}, err
		}
		return tr, eo, nil
	}
	owner := opts.Owner
	if owner == "" {
		host, _ := os.Hostname()
		owner = fmt.Sprintf("%d@%s", os.Getuid(), host)
	}
	sb, err := ensureSandbox(ctx, c, t, target, owner, log)
	if err != nil {
		return nil, nohup.Options{}, err
	}
	tr := newTransport(c, sb.ns, sb.name, sandboxContainer, sb.uid)
	if t.Persist {
		return tr, eo, nil
	}
	eo.OnClose = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), deleteTimeout)
		defer cancel()
		return sb.remove(ctx)
	}
	return tr, eo, nil
}

// openPod checks that the pod runs and that this user may exec into it.
func openPod(ctx context.Context, c *cluster, t Target) (*Transport, error) {
	name := t.Namespace + "/" + t.Pod
	gctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	pod, err := c.cs.CoreV1().Pods(t.Namespace).Get(gctx, t.Pod, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("k8s: no pod %s in namespace %s (context %s); kubectl -n %s get pods lists them: %w",
			t.Pod, t.Namespace, c.context, t.Namespace, env.ErrSandboxGone)
	}
	if err != nil {
		if apierrors.IsForbidden(err) {
			if aerr := c.checkAccess(ctx, t.Namespace, podPermissions); aerr != nil {
				return nil, aerr
			}
		}
		return nil, c.apiError(gctx, "look up pod "+name, err)
	}
	if t.Container != "" {
		found := false
		for _, ct := range pod.Spec.Containers {
			found = found || ct.Name == t.Container
		}
		if !found {
			return nil, fmt.Errorf("k8s: pod %s has no container %s: %w", name, t.Container, env.ErrSandboxGone)
		}
	}
	if why := notRunning(pod, t.Container); why != "" {
		return nil, fmt.Errorf("k8s: pod %s %s: %w", name, why, env.ErrSandboxGone)
	}
	if pod.Status.Phase != "Running" {
		return nil, fmt.Errorf("k8s: pod %s is %s, not running yet; wait for it (kubectl -n %s wait --for=condition=Ready pod/%s): %w",
			name, pod.Status.Phase, t.Namespace, t.Pod, env.ErrUnavailable)
	}
	if err := c.checkAccess(ctx, t.Namespace, podPermissions); err != nil {
		return nil, err
	}
	return newTransport(c, t.Namespace, t.Pod, t.Container, string(pod.UID)), nil
}
