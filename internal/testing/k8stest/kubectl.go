package k8stest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
)

// Kubectl returns the kubectl to compare corral with: $CORRAL_K8S_KUBECTL,
// else the one scripts/k8s/build.sh built with the cluster (the same
// version as the API server), else kubectl on PATH; "" when there is none.
func (c *TestCluster) Kubectl() string {
	if p := os.Getenv("CORRAL_K8S_KUBECTL"); p != "" {
		return p
	}
	cache := os.Getenv("CORRAL_K8S_CACHE")
	if cache == "" {
		if home, err := os.UserHomeDir(); err == nil {
			cache = filepath.Join(home, ".cache", "corral", "k8s")
		}
	}
	if found, _ := filepath.Glob(filepath.Join(cache, "*", "bin", "kubectl")); len(found) > 0 {
		sort.Strings(found)
		return found[len(found)-1]
	}
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p
	}
	return ""
}

// ExecTo runs argv in the pod's container as Exec does, streaming its
// stdout to w (stderr is kept for the error): for output too large to
// hold.
func (c *TestCluster) ExecTo(ctx context.Context, ns, pod, container string, w io.Writer, argv ...string) error {
	var errOut bytes.Buffer
	if err := c.stream(ctx, ns, pod, container, nil, w, &errOut, argv); err != nil {
		return fmt.Errorf("exec %v: %w: %s", argv, err, errOut.String())
	}
	return nil
}

// stream runs argv in the pod's container through the exec subresource:
// WebSocket v5 first, SPDY when the server refuses the upgrade, as kubectl.
func (c *TestCluster) stream(ctx context.Context, ns, pod, container string, stdin io.Reader, stdout, stderr io.Writer, argv []string) error {
	req := c.clientset.CoreV1().RESTClient().Post().
		Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: container,
			Command:   argv,
			Stdin:     stdin != nil,
			Stdout:    true,
			Stderr:    true,
		}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(c.config, http.MethodGet, req.URL().String())
	if err != nil {
		return err
	}
	spdy, err := remotecommand.NewSPDYExecutor(c.config, http.MethodPost, req.URL())
	if err != nil {
		return err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return err
	}
	return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
}
