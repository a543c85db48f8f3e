package k8s

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/corralhq/corral/env"
)

// dialTimeout bounds a connection to the API server: an unreachable one
// is reported as env.ErrUnavailable after this, not after the kernel's
// minutes of SYN retries.
const dialTimeout = 5 * time.Second

// apiTimeout bounds one API request (a pod lookup, an access review) made
// without a deadline of the caller's.
const apiTimeout = 10 * time.Second

// cluster is a connection to one API server in one kubeconfig context.
type cluster struct {
	cfg       *rest.Config
	cs        kubernetes.Interface
	namespace string // the context's namespace, for k8s-pod:// without namespace=
	context   string // for messages
}

// connect loads the configuration the way kubectl does: $KUBECONFIG (a
// colon-separated list) or ~/.kube/config, the context named (else the
// current one), and in-cluster configuration (the pod's service account)
// when there is no kubeconfig and corral runs in a pod.
func connect(kubeconfig, kubeContext string) (*cluster, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: kubeContext}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, errors.New("k8s: no cluster configured: set KUBECONFIG, write ~/.kube/config, or run corral in a pod")
		}
		return nil, fmt.Errorf("k8s: kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil || ns == "" {
		ns = "default"
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Dial = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 15 * time.Second}).DialContext
	// The engine's calls are execs (not rate limited) and a few lookups;
	// client-go's default of 5 requests a second would still queue a burst
	// of pod lookups behind one another.
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "corral"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("k8s: client: %w", err)
	}
	name := kubeContext
	if name == "" {
		if raw, err := cc.RawConfig(); err == nil {
			name = raw.CurrentContext
		}
	}
	if name == "" {
		name = "in-cluster"
	}
	return &cluster{cfg: cfg, cs: cs, namespace: ns, context: name}, nil
}

// permission is one verb on one resource that corral needs.
type permission struct {
	verb, resource, subresource string
}

func (p permission) String() string {
	if p.subresource != "" {
		return p.verb + " " + p.resource + "/" + p.subresource
	}
	return p.verb + " " + p.resource
}

// podPermissions are what running commands in an existing pod needs:
// upgrading an exec asks for both get and create on pods/exec (the
// WebSocket upgrade is a GET, SPDY's a POST, and since 1.31 a WebSocket
// exec is authorized as create too).
var podPermissions = []permission{{"get", "pods", ""}, {"get", "pods", "exec"}, {"create", "pods", "exec"}}

// sandboxPermissions are what a k8s-pod:// sandbox needs on top.
var sandboxPermissions = []permission{{"create", "pods", ""}, {"delete", "pods", ""}, {"watch", "pods", ""}, {"list", "pods", ""}, {"list", "events", ""}}

// ErrForbidden is matched (errors.Is) by errors of a call the cluster
// refused for want of a permission.
var ErrForbidden = errors.New("forbidden")

// checkAccess asks the API server whether this user may do each of perms
// in ns, and names every one it may not: "create pods/exec in namespace
// ci".
func (c *cluster) checkAccess(ctx context.Context, ns string, perms []permission) error {
	missing, err := c.missingAccess(ctx, ns, perms)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("k8s: context %s may not %s in namespace %s; grant them with a Role (see docs/backends.md): %w",
			c.context, strings.Join(missing, ", "), ns, ErrForbidden)
	}
	return nil
}

// missingAccess asks the API server, with one SelfSubjectAccessReview per
// permission (in parallel), which of perms this user may not do in ns, and
// returns them in perms' order ("create pods/exec"). The error is that of
// a review the server did not answer, classified by apiError.
func (c *cluster) missingAccess(ctx context.Context, ns string, perms []permission) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	denied := make([]bool, len(perms))
	errs := make([]error, len(perms))
	var wg sync.WaitGroup
	for i, p := range perms {
		wg.Go(func() {
			r, err := c.cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: ns, Verb: p.verb, Resource: p.resource, Subresource: p.subresource,
				}},
			}, metav1.CreateOptions{})
			if err != nil {
				errs[i] = err
				return
			}
			denied[i] = !r.Status.Allowed
		})
	}
	wg.Wait()
	var missing []string
	for i, p := range perms {
		if errs[i] != nil {
			return nil, c.apiError(ctx, "check permissions", errs[i])
		}
		if denied[i] {
			missing = append(missing, p.String())
		}
	}
	return missing, nil
}

// apiError classifies an error of an API request: the server unreachable
// or overloaded is env.ErrUnavailable (the engine retries), a refusal for
// want of a permission ErrForbidden.
func (c *cluster) apiError(ctx context.Context, op string, err error) error {
	switch {
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return fmt.Errorf("k8s: %s: %w", op, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("k8s: %s: %s: %w", op, short(apiMessage(err)), ErrForbidden)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("k8s: %s: the cluster of context %s does not accept these credentials (log in again, or check the token in the kubeconfig)", op, c.context)
	case apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsTooManyRequests(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err), apierrors.IsUnexpectedServerError(err):
		return fmt.Errorf("k8s: %s: %s: %w", op, short(apiMessage(err)), env.ErrUnavailable)
	case isNetError(err):
		return fmt.Errorf("k8s: %s: API server %s unreachable (%s): %w", op, c.cfg.Host, short(err.Error()), env.ErrUnavailable)
	}
	return fmt.Errorf("k8s: %s: %w", op, err)
}

func apiMessage(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return se.Status().Message
	}
	return err.Error()
}

// isNetError reports an error of the connection to the API server rather
// than an answer from it.
func isNetError(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return true
	}
	s := err.Error()
	for _, w := range []string{"connection refused", "connection reset", "broken pipe", "EOF", "no route to host", "i/o timeout", "TLS handshake timeout", "http2: client connection lost", "use of closed network connection"} {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}
