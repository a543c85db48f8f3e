// Package k8stest gives tests the single-node Kubernetes cluster that
// `make k8s-up` (scripts/k8s/up.sh) brings up on this machine: its admin
// client, fresh namespaces, Ready pods from the test image, a kubeconfig
// for a user with exactly the permissions a test grants, and exec into a
// pod through the API server.
//
// The cluster is found from CORRAL_K8S_KUBECONFIG, else from
// ${CORRAL_K8S_DIR:-/var/tmp/corral-k8s}/kubeconfig. Without a cluster that
// answers, a test is skipped, or fails when CORRAL_REQUIRE_K8S=1 (CI).
// Everything a test creates is deleted at its cleanup, and the deletion is
// waited for.
package k8stest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Environment variables and defaults, as scripts/k8s/up.sh writes them.
const (
	// EnvKubeconfig names the admin kubeconfig; it wins over EnvDir.
	EnvKubeconfig = "CORRAL_K8S_KUBECONFIG"
	// EnvDir is the cluster's state dir, holding kubeconfig and
	// kubeconfig-limited.
	EnvDir = "CORRAL_K8S_DIR"
	// EnvLimitedKubeconfig names the limited user's kubeconfig; without it
	// kubeconfig-limited beside the admin's is used.
	EnvLimitedKubeconfig = "CORRAL_K8S_LIMITED_KUBECONFIG"
	// EnvImage overrides the test image's reference.
	EnvImage = "CORRAL_K8S_IMAGE"
	// EnvRequire=1 turns a missing cluster into a failure.
	EnvRequire = "CORRAL_REQUIRE_K8S"

	DefaultDir   = "/var/tmp/corral-k8s"
	DefaultImage = "docker.io/library/corral-test:k8s"
	// LimitedUser is the user of kubeconfig-limited: it has no RBAC binding
	// but the ones LimitedKubeconfig makes.
	LimitedUser = "corral-limited"
)

// Bounds: a test on a cluster that stops answering fails within these,
// never hangs.
const (
	probeTimeout  = 5 * time.Second
	readyTimeout  = 60 * time.Second
	deleteTimeout = 60 * time.Second
	callTimeout   = 15 * time.Second
)

// TestCluster is the test cluster, as one test sees it.
type TestCluster struct {
	kubeconfig string
	limited    string
	config     *rest.Config
	clientset  *kubernetes.Clientset
	image      string
}

var (
	findOnce sync.Once
	found    *TestCluster
	notFound string
)

// Cluster returns the test cluster, or skips the test with the reason (or
// fails it when CORRAL_REQUIRE_K8S=1). The API server must answer within
// 5 s; the answer is kept for the rest of the test binary's run.
func Cluster(t testing.TB) *TestCluster {
	t.Helper()
	findOnce.Do(func() { found, notFound = find() })
	if found == nil {
		msg := "no test cluster: run `make k8s-up` (as root): " + notFound
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s (%s=1)", msg, EnvRequire)
		}
		t.Skip(msg)
	}
	return found
}

func find() (*TestCluster, string) {
	dir := os.Getenv(EnvDir)
	if dir == "" {
		dir = DefaultDir
	}
	kc := os.Getenv(EnvKubeconfig)
	if kc == "" {
		kc = filepath.Join(dir, "kubeconfig")
	}
	if _, err := os.Stat(kc); err != nil {
		return nil, fmt.Sprintf("%v", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		return nil, fmt.Sprintf("%s: %v", kc, err)
	}
	// Many tests share one cluster and create in parallel; client-go's
	// default of 5 requests a second would pace them.
	cfg.QPS, cfg.Burst = 200, 400
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Sprintf("%s: %v", kc, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	if _, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return nil, fmt.Sprintf("the API server of %s does not answer within %v: %v", kc, probeTimeout, err)
	}
	limited := os.Getenv(EnvLimitedKubeconfig)
	if limited == "" {
		limited = filepath.Join(filepath.Dir(kc), "kubeconfig-limited")
	}
	image := os.Getenv(EnvImage)
	if image == "" {
		image = DefaultImage
	}
	return &TestCluster{
		kubeconfig: kc,
		limited:    limited,
		config:     cfg,
		clientset:  cs,
		image:      image,
	}, ""
}

// Kubeconfig is the admin kubeconfig's path (user in system:masters,
// context corral-test).
func (c *TestCluster) Kubeconfig() string { return c.kubeconfig }

// Config is a copy of the admin's REST configuration.
func (c *TestCluster) Config() *rest.Config { return rest.CopyConfig(c.config) }

// Clientset is the admin's client.
func (c *TestCluster) Clientset() *kubernetes.Clientset { return c.clientset }

// Image is the test image's reference: busybox-static with its applets,
// present on the node only (pods must use imagePullPolicy: Never).
func (c *TestCluster) Image() string { return c.image }

func randomSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), callTimeout)
}

// Namespace creates a fresh namespace corral-test-XXXXXX and deletes it at
// the test's cleanup, with everything in it, waiting until it is gone.
func (c *TestCluster) Namespace(t testing.TB) string {
	t.Helper()
	ctx, cancel := callCtx()
	defer cancel()
	ns, err := c.clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{
			Name:   "corral-test-" + randomSuffix(),
			Labels: map[string]string{"dev.corral.test": "true"},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("k8stest: create namespace: %v", err)
	}
	t.Cleanup(func() {
		if err := c.deleteNamespace(ns.Name); err != nil {
			t.Errorf("k8stest: %v", err)
		}
	})
	return ns.Name
}

// deleteNamespace does what the namespace controller of a full cluster
// does (the test cluster runs no controller-manager): it deletes every
// namespaced object, waits for the pods to be gone from the node, lifts
// the namespace's finalizer, and waits until the namespace is gone.
func (c *TestCluster) deleteNamespace(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), deleteTimeout)
	defer cancel()
	nsAPI := c.clientset.CoreV1().Namespaces()
	if err := nsAPI.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("delete namespace %s: %w", name, err)
	}
	if err := c.deleteContent(ctx, name); err != nil {
		return fmt.Errorf("delete the content of namespace %s: %w", name, err)
	}
	// Pods go last from the API: the kubelet removes each only once its
	// containers have stopped.
	if err := c.waitNoPods(ctx, name); err != nil {
		return err
	}
	ns, err := nsAPI.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get namespace %s: %w", name, err)
	}
	if len(ns.Spec.Finalizers) > 0 {
		ns.Spec.Finalizers = nil
		if _, err := nsAPI.Finalize(ctx, ns, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("finalize namespace %s: %w", name, err)
		}
	}
	// With no finalizer left a second delete removes it at once.
	if err := nsAPI.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete namespace %s after finalizing: %w", name, err)
	}
	for {
		_, err := nsAPI.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %s still there after %v (last error: %v)", name, deleteTimeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *TestCluster) deleteContent(ctx context.Context, ns string) error {
	lists, err := c.clientset.Discovery().ServerPreferredNamespacedResources()
	if err != nil && len(lists) == 0 {
		return err
	}
	// Deprecation warnings (v1 Endpoints…) are no news to a cleanup.
	cfg := rest.CopyConfig(c.config)
	cfg.WarningHandler = rest.NoWarnings{}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	background := metav1.DeletePropagationBackground
	var errs []error
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if !hasVerb(r.Verbs, "deletecollection") || !hasVerb(r.Verbs, "list") {
				continue
			}
			err := dyn.Resource(gv.WithResource(r.Name)).Namespace(ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &background}, metav1.ListOptions{})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsMethodNotSupported(err) {
				errs = append(errs, fmt.Errorf("%s: %w", r.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

func hasVerb(verbs []string, v string) bool {
	for _, x := range verbs {
		if x == v {
			return true
		}
	}
	return false
}

func (c *TestCluster) waitNoPods(ctx context.Context, ns string) error {
	for {
		pods, err := c.clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err == nil && len(pods.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			var names []string
			if pods != nil {
				for _, p := range pods.Items {
					names = append(names, p.Name)
				}
			}
			return fmt.Errorf("pods of namespace %s not gone within %v: %v (last error: %v)", ns, deleteTimeout, names, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// KeepAlive is the test pods' command: it runs until the pod is deleted.
var KeepAlive = []string{"/bin/sleep", "2147483647"}

// Pod creates a pod named name in ns from the test image, running
// KeepAlive, and waits (by a watch) until it is Ready. Its containers
// share one process namespace, so the pause program is PID 1 and reaps
// orphans. The pod is deleted at the test's cleanup, and its deletion
// waited for: the kubelet removes it from the API only once its containers
// have stopped.
func (c *TestCluster) Pod(t testing.TB, ns, name string) *corev1.Pod {
	t.Helper()
	grace := int64(1)
	share := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{"dev.corral.test": "true"},
		},
		Spec: corev1.PodSpec{
			ShareProcessNamespace:         &share,
			TerminationGracePeriodSeconds: &grace,
			RestartPolicy:                 corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           c.image,
				ImagePullPolicy: corev1.PullNever,
				Command:         KeepAlive,
			}},
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	created, err := c.clientset.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("k8stest: create pod %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() {
		if err := c.deletePod(ns, name); err != nil {
			t.Errorf("k8stest: %v", err)
		}
	})
	ready, err := c.waitReady(ctx, created)
	if err != nil {
		t.Fatalf("k8stest: %v", err)
	}
	return ready
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitReady watches the pod from the version it was created at until it
// is Ready, fails at once when it cannot become Ready, and otherwise says
// at the deadline what its status and events show.
func (c *TestCluster) waitReady(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	api := c.clientset.CoreV1().Pods(p.Namespace)
	last := p
	for {
		w, err := api.Watch(ctx, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", p.Name).String(),
			ResourceVersion: last.ResourceVersion,
		})
		if err != nil {
			return nil, fmt.Errorf("watch pod %s/%s: %w (%s)", p.Namespace, p.Name, err, c.podReport(last))
		}
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Deleted:
				w.Stop()
				return nil, fmt.Errorf("pod %s/%s was deleted while waiting for it to be Ready", p.Namespace, p.Name)
			case watch.Error:
				continue
			}
			got, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			last = got
			if podReady(got) {
				w.Stop()
				return got, nil
			}
			if got.Status.Phase == corev1.PodFailed || got.Status.Phase == corev1.PodSucceeded {
				w.Stop()
				return nil, fmt.Errorf("pod %s/%s ended before it was Ready: %s", p.Namespace, p.Name, c.podReport(got))
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("pod %s/%s not Ready within %v: %s", p.Namespace, p.Name, readyTimeout, c.podReport(last))
		}
		// The server ended the watch (a timeout of its own): go on from
		// the last version seen.
	}
}

// podReport says why a pod is not Ready: phase, containers' waiting or
// terminated reasons, conditions and the pod's events.
func (c *TestCluster) podReport(p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase %s", p.Status.Phase)
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			fmt.Fprintf(&b, "; container %s waiting: %s %s", cs.Name, w.Reason, w.Message)
		}
		if x := cs.State.Terminated; x != nil {
			fmt.Fprintf(&b, "; container %s terminated: %s (exit %d) %s", cs.Name, x.Reason, x.ExitCode, x.Message)
		}
	}
	for _, cond := range p.Status.Conditions {
		if cond.Status != corev1.ConditionTrue && (cond.Reason != "" || cond.Message != "") {
			fmt.Fprintf(&b, "; %s: %s %s", cond.Type, cond.Reason, cond.Message)
		}
	}
	ctx, cancel := callCtx()
	defer cancel()
	evs, err := c.clientset.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", p.Name).String(),
	})
	if err == nil {
		sort.Slice(evs.Items, func(i, j int) bool {
			return evs.Items[i].LastTimestamp.Before(&evs.Items[j].LastTimestamp)
		})
		for _, e := range evs.Items {
			fmt.Fprintf(&b, "; event %s %s: %s", e.Type, e.Reason, e.Message)
		}
	}
	return b.String()
}

func (c *TestCluster) deletePod(ns, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), deleteTimeout)
	defer cancel()
	api := c.clientset.CoreV1().Pods(ns)
	err := api.Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete pod %s/%s: %w", ns, name, err)
	}
	for {
		_, err := api.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pod %s/%s still there %v after its deletion (last error: %v)", ns, name, deleteTimeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// LimitedKubeconfig grants the user corral-limited exactly rules in ns (a
// Role and a RoleBinding, removed at the test's cleanup) and returns the
// path of a kubeconfig for that user, with ns as its namespace, in
// t.TempDir(). The grant is in effect when it returns.
func (c *TestCluster) LimitedKubeconfig(t testing.TB, ns string, rules []rbacv1.PolicyRule) string {
	t.Helper()
	if _, err := os.Stat(c.limited); err != nil {
		t.Fatalf("k8stest: the limited user's kubeconfig: %v (scripts/k8s/up.sh writes it)", err)
	}
	ctx, cancel := callCtx()
	defer cancel()
	name := "corral-limited-" + randomSuffix()
	rbac := c.clientset.RbacV1()
	if _, err := rbac.Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      rules,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("k8stest: create role %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := callCtx()
		defer cancel()
		if err := rbac.Roles(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("k8stest: delete role %s/%s: %v", ns, name, err)
		}
	})
	if _, err := rbac.RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: LimitedUser}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("k8stest: create rolebinding %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := callCtx()
		defer cancel()
		if err := rbac.RoleBindings(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("k8stest: delete rolebinding %s/%s: %v", ns, name, err)
		}
	})

	cfg, err := clientcmd.LoadFromFile(c.limited)
	if err != nil {
		t.Fatalf("k8stest: %v", err)
	}
	if kc := cfg.Contexts[cfg.CurrentContext]; kc != nil {
		kc.Namespace = ns
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatalf("k8stest: write %s: %v", path, err)
	}
	if err := c.waitGranted(path, ns, rules); err != nil {
		t.Fatalf("k8stest: %v", err)
	}
	return path
}

// waitGranted waits until the RBAC authorizer's cache, which follows the
// API by a watch, allows the first verb of the first resource rule.
func (c *TestCluster) waitGranted(kubeconfig, ns string, rules []rbacv1.PolicyRule) error {
	var attrs *authzAttrs
	for _, r := range rules {
		if len(r.Verbs) > 0 && len(r.Resources) > 0 && r.Verbs[0] != "*" && r.Resources[0] != "*" {
			group := ""
			if len(r.APIGroups) > 0 && r.APIGroups[0] != "*" {
				group = r.APIGroups[0]
			}
			attrs = &authzAttrs{verb: r.Verbs[0], group: group, resource: r.Resources[0]}
			break
		}
	}
	if attrs == nil {
		return nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := callCtx()
	defer cancel()
	resource, sub, _ := strings.Cut(attrs.resource, "/")
	for {
		review, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, selfReview(ns, attrs.verb, attrs.group, resource, sub), metav1.CreateOptions{})
		if err == nil && review.Status.Allowed {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the grant of %s %s to %s in %s not in effect within %v (last: %v)", attrs.verb, attrs.resource, LimitedUser, ns, callTimeout, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

type authzAttrs struct{ verb, group, resource string }

func selfReview(ns, verb, group, resource, sub string) *authorizationv1.SelfSubjectAccessReview {
	return &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace:   ns,
				Verb:        verb,
				Group:       group,
				Resource:    resource,
				Subresource: sub,
			},
		},
	}
}

// Exec runs argv in the pod's container through the API server's exec
// subresource (WebSocket v5, falling back to SPDY, as kubectl does),
// with stdin if not nil, and returns its output. A command that exits
// non-zero gives an error that wraps an exec.CodeExitError.
func (c *TestCluster) Exec(ctx context.Context, ns, pod, container string, stdin io.Reader, argv ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	err = c.stream(ctx, ns, pod, container, stdin, &out, &errOut, argv)
	return out.String(), errOut.String(), err
}
