package k8s

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/tools/clientcmd"
)

// versionTimeout bounds the server version request of Check: it is the
// first request, so an API server that does not answer is reported after
// this rather than after every later request's own timeout.
const versionTimeout = 5 * time.Second

// Report is what Check found: the JSON that `corral-backend-k8s check`
// prints and `corral doctor` and `corral backends` read.
type Report struct {
	// Context is the kubeconfig context used ("in-cluster" for the pod's
	// service account).
	Context string `json:"context,omitempty"`
	// Server is the API server's URL.
	Server string `json:"server,omitempty"`
	// Version is the API server's git version, e.g. "v1.34.4".
	Version string `json:"version,omitempty"`
	// Namespace is where the permissions were checked: the one asked
	// for, else the context's.
	Namespace string `json:"namespace,omitempty"`
	// Missing are the permissions a k8s:// target needs in Namespace
	// that this user lacks, e.g. "create pods/exec".
	Missing []string `json:"missing,omitempty"`
	// MissingSandbox are the permissions a k8s-pod:// target needs in
	// Namespace that this user lacks: Missing and the sandbox's own
	// (create, delete, watch and list pods, list events).
	MissingSandbox []string `json:"missing_sandbox,omitempty"`
	// NoCluster is set when no cluster is configured at all: no
	// kubeconfig (KUBECONFIG, ~/.kube/config) and not in a pod.
	NoCluster bool `json:"no_cluster,omitempty"`
	// Err says, in one sentence, why the cluster could not be checked.
	Err string `json:"error,omitempty"`
}

// OK reports whether the cluster answered and both target forms are
// allowed.
func (r Report) OK() bool {
	return r.Err == "" && len(r.Missing) == 0 && len(r.MissingSandbox) == 0
}

// Check connects to the cluster of kubeContext ("" means the current one)
// as Open does, asks the API server's version, and checks with
// SelfSubjectAccessReviews which permissions of k8s:// and k8s-pod://
// targets this user lacks in namespace ("" means the context's). It is
// bounded by ctx, by versionTimeout for the first request and by
// apiTimeout for the reviews.
func Check(ctx context.Context, kubeconfig, kubeContext, namespace string) Report {
	r := Report{Context: kubeContext, Namespace: namespace}
	c, err := connect(kubeconfig, kubeContext)
	if err != nil {
		r.NoCluster = noCluster(kubeconfig, kubeContext)
		r.Err = err.Error()
		return r
	}
	r.Context, r.Server = c.context, c.cfg.Host
	if r.Namespace == "" {
		r.Namespace = c.namespace
	}

	v, err := c.serverVersion(ctx)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	r.Version = v

	perms := append(slices.Clip(podPermissions), sandboxPermissions...)
	missing, err := c.missingAccess(ctx, r.Namespace, perms)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	for _, m := range missing {
		if slices.ContainsFunc(podPermissions, func(p permission) bool { return p.String() == m }) {
			r.Missing = append(r.Missing, m)
		}
	}
	r.MissingSandbox = missing
	return r
}

// serverVersion asks the API server's /version (what discovery's
// ServerVersion asks, but under ctx: ServerVersion takes no context).
func (c *cluster) serverVersion(ctx context.Context) (string, error) {
	vctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	raw, err := c.cs.Discovery().RESTClient().Get().AbsPath("/version").Do(vctx).Raw()
	switch {
	case err == nil:
	case vctx.Err() != nil:
		return "", fmt.Errorf("k8s: the API server %s of context %s does not answer within %v; check that the cluster runs and the kubeconfig's server address",
			c.cfg.Host, c.context, versionTimeout)
	case isNetError(err):
		cause := err
		var ue *url.Error
		if errors.As(err, &ue) {
			cause = ue.Err // without the request's URL, which repeats the server's
		}
		return "", fmt.Errorf("k8s: cannot reach the API server %s of context %s (%s); check that the cluster runs and the kubeconfig's server address",
			c.cfg.Host, c.context, clip(cause.Error(), 160))
	case apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err):
		return "", c.apiError(vctx, "server version", err)
	default:
		return "", fmt.Errorf("k8s: the API server %s did not tell its version: %s", c.cfg.Host, short(apiMessage(err)))
	}
	var v version.Info
	if err := json.Unmarshal(raw, &v); err != nil || v.GitVersion == "" {
		return "", errors.New("k8s: the API server " + c.cfg.Host + " answered /version with no version: is it a Kubernetes API server?")
	}
	return v.GitVersion, nil
}

// noCluster reports whether no cluster is configured at all, as kubectl
// would find it: connect's error does not say so in a form to test.
func noCluster(kubeconfig, kubeContext string) bool {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext})
	_, err := cc.ClientConfig()
	return clientcmd.IsEmptyConfig(err)
}

// clip keeps an error's text to one line of at most n bytes.
func clip(s string, n int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
