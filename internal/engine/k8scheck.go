package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/backends"
	"github.com/corralhq/corral/plugins"
)

// k8sReport is what `corral-backend-k8s check` prints: the JSON of
// env/k8s.Report, mirrored here because the corral command may not import
// env/k8s (client-go; see TestNoClientGo).
type k8sReport struct {
	Context        string   `json:"context"`
	Server         string   `json:"server"`
	Version        string   `json:"version"`
	Namespace      string   `json:"namespace"`
	Missing        []string `json:"missing"`         // what k8s:// lacks
	MissingSandbox []string `json:"missing_sandbox"` // what k8s-pod:// lacks (Missing included)
	NoCluster      bool     `json:"no_cluster"`
	Err            string   `json:"error"`
}

// k8sCheckTimeout bounds the plugin's check: it bounds its own requests
// (5 s for the first, 12 s in all), so this only ends a plugin that hangs.
const k8sCheckTimeout = 15 * time.Second

// k8sCheckMax bounds what is kept of the check's stdout and stderr: its
// report is a few hundred bytes.
const k8sCheckMax = 64 << 10

// probeKubernetes is corral doctor's line for the Kubernetes backend: the
// plugin's check of the cluster (reachable, version, permissions), or why
// there is nothing to check.
func probeKubernetes(ctx context.Context) probe {
	f, err := plugins.Find(backends.K8sPlugin, plugins.Options{})
	if errors.Is(err, plugins.ErrNoPlugin) {
		return probe{Name: "kubernetes", Status: "skipped", Detail: fmt.Sprintf(
			"the Kubernetes backend %s%s is not installed: make build puts bin/%s%s beside corral (go install ./cmd/... puts it in GOBIN)",
			plugins.BinaryPrefix, backends.K8sPlugin, plugins.BinaryPrefix, backends.K8sPlugin)}
	}
	if err != nil {
		return probe{Name: "kubernetes", Detail: err.Error()}
	}
	return checkKubernetes(ctx, f)
}

// checkKubernetes runs the Kubernetes plugin f's check and says what it
// found in one line.
func checkKubernetes(ctx context.Context, f plugins.Found) probe {
	if err := plugins.Runnable(f); err != nil {
		return probe{Name: "kubernetes", Detail: err.Error()}
	}
	r, err := runK8sCheck(ctx, f.Path)
	if err != nil {
		return probe{Name: "kubernetes", Detail: err.Error()}
	}
	return k8sProbe(r)
}

// runK8sCheck runs `PATH check` with what the plugin gets of corral's
// environment when it opens a target (k8sEnviron, HOME and PATH) and in
// the same directory, so that it finds the cluster the backend would.
func runK8sCheck(ctx context.Context, path string) (k8sReport, error) {
	ctx, cancel := context.WithTimeout(ctx, k8sCheckTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "check")
	for _, k := range []string{"HOME", "PATH"} {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Env = append(cmd.Env, backends.K8sEnviron()...)
	cmd.Dir = plugins.WorkDir
	stdout, stderr := &capBuffer{max: k8sCheckMax}, &capBuffer{max: k8sCheckMax}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = time.Second // a grandchild holding the pipes must not hold us
	runErr := cmd.Run()
	// The check exits 1 when something is missing: its report counts
	// whatever the exit status.
	var r k8sReport
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &r); err == nil && (r.Err != "" || r.Server != "" || r.NoCluster) {
		return r, nil
	}
	switch {
	case ctx.Err() != nil:
		return r, fmt.Errorf("%s check did not answer within %v", path, k8sCheckTimeout)
	case runErr != nil:
		msg := firstLine(stderr.String())
		if msg == "" {
			msg = "no report on stdout"
		}
		return r, fmt.Errorf("%s check failed (%v): %s", path, runErr, clipText(msg, 200))
	}
	return r, fmt.Errorf("%s check printed no report (an older plugin? make build installs the current one)", path)
}

// k8sProbe says in one line what the check found: where the cluster is,
// its version, and whether k8s:// and k8s-pod:// are allowed, else what
// they lack or why the cluster could not be checked.
func k8sProbe(r k8sReport) probe {
	p := probe{Name: "kubernetes"}
	switch {
	case r.NoCluster:
		p.Status, p.Detail = "skipped", "no cluster configured (KUBECONFIG, ~/.kube/config)"
		return p
	case r.Err != "":
		p.Detail = r.Err
		return p
	}
	where := fmt.Sprintf("context %s, server %s, %s", r.Context, r.Server, r.Version)
	const grant = "grant them with a Role (docs/backends.md#a-minimal-role)"
	switch {
	case len(r.Missing) == 0 && len(r.MissingSandbox) == 0:
		p.OK = true
		p.Detail = where + "; k8s:// and k8s-pod:// allowed in namespace " + r.Namespace
	case len(r.Missing) == 0:
		p.Detail = fmt.Sprintf("%s; k8s:// allowed in namespace %s, k8s-pod:// lacks %s; %s",
			where, r.Namespace, strings.Join(r.MissingSandbox, ", "), grant)
	default:
		p.Detail = fmt.Sprintf("%s; in namespace %s k8s:// lacks %s, k8s-pod:// lacks %s; %s",
			where, r.Namespace, strings.Join(r.Missing, ", "), strings.Join(r.MissingSandbox, ", "), grant)
	}
	return p
}

// probeMark is a probe's word in a table: its status, else ok or missing.
func probeMark(p probe) string {
	switch {
	case p.Status != "":
		return p.Status
	case !p.OK:
		return "missing"
	}
	return "ok"
}

// capBuffer keeps the first max bytes written to it and drops the rest.
type capBuffer struct {
	bytes.Buffer
	max int
}

func (b *capBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
