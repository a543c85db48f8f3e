package k8s

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/corralhq/corral/internal/testing/k8stest"
)

// TestCheck: on the test cluster, the admin lacks nothing and sees the
// server's version; a user granted only get and list on pods is told that
// both target forms lack pods/exec and k8s-pod:// the sandbox's verbs.
func TestCheck(t *testing.T) {
	c := k8stest.Cluster(t)
	ns := c.Namespace(t)
	ctx := context.Background()

	r := Check(ctx, c.Kubeconfig(), "", ns)
	require.Empty(t, r.Err)
	assert.True(t, r.OK(), "%+v", r)
	assert.True(t, strings.HasPrefix(r.Version, "v1.34."), "version %q", r.Version)
	assert.Equal(t, c.Config().Host, r.Server)
	assert.Equal(t, ns, r.Namespace)
	assert.NotEmpty(t, r.Context)
	assert.Empty(t, r.Missing)
	assert.Empty(t, r.MissingSandbox)

	kc := c.LimitedKubeconfig(t, ns, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}}})
	r = Check(ctx, kc, "", "") // the namespace of the limited kubeconfig's context
	require.Empty(t, r.Err)
	assert.False(t, r.OK())
	assert.Equal(t, ns, r.Namespace)
	assert.Equal(t, []string{"get pods/exec", "create pods/exec"}, r.Missing)
	assert.Equal(t, []string{"get pods/exec", "create pods/exec", "create pods", "delete pods", "watch pods", "list events"}, r.MissingSandbox)
}

// TestCheckUnreachable: an API server that accepts connections and never
// answers is reported in one sentence within the version request's bound.
func TestCheckUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close() // held open, never answered
		}
	}()
	kc := writeKubeconfig(t, "https://"+ln.Addr().String())
	start := time.Now()
	r := Check(context.Background(), kc, "", "")
	assert.Less(t, time.Since(start), versionTimeout+2*time.Second)
	assert.Equal(t, "silent", r.Context)
	assert.Equal(t, "default", r.Namespace)
	assert.False(t, r.NoCluster)
	assert.Contains(t, r.Err, "does not answer within 5s")
	assert.NotContains(t, r.Err, "\n")

	// Refused at once: said at once.
	addr := ln.Addr().String()
	ln.Close()
	start = time.Now()
	r = Check(context.Background(), writeKubeconfig(t, "https://"+addr), "", "")
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.Contains(t, r.Err, "cannot reach the API server https://"+addr)
	assert.Contains(t, r.Err, "connection refused")
}

// TestCheckNoCluster: without any kubeconfig (and not in a pod) the report
// says that no cluster is configured.
func TestCheckNoCluster(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	r := Check(context.Background(), "", "", "")
	assert.True(t, r.NoCluster, "%+v", r)
	assert.Contains(t, r.Err, "no cluster configured")

	// A context that does not exist is an error, not the absence of a
	// cluster.
	r = Check(context.Background(), writeKubeconfig(t, "https://127.0.0.1:1"), "nope", "")
	assert.False(t, r.NoCluster)
	assert.Contains(t, r.Err, `context "nope" does not exist`)
}

func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: `+server+`
    insecure-skip-tls-verify: true
users:
- name: u
  user:
    token: not-a-token
contexts:
- name: silent
  context: {cluster: c, user: u}
current-context: silent
`), 0o600))
	return path
}

// docsRole is the minimal Role of docs/backends.md.
func docsRole(t *testing.T) rbacv1.Role {
	t.Helper()
	b, err := os.ReadFile("../../docs/backends.md")
	require.NoError(t, err)
	s := string(b)
	i := strings.Index(s, "### A minimal Role")
	require.GreaterOrEqual(t, i, 0, "docs/backends.md has no section A minimal Role")
	s = s[i:]
	start := strings.Index(s, "```yaml\n")
	require.GreaterOrEqual(t, start, 0)
	s = s[start+len("```yaml\n"):]
	s = s[:strings.Index(s, "```")]
	var role rbacv1.Role
	require.NoError(t, yaml.NewYAMLOrJSONDecoder(strings.NewReader(s), 4096).Decode(&role))
	require.Equal(t, "Role", role.Kind)
	return role
}

// TestDocsRoleIsExact: the Role of docs/backends.md grants exactly the
// permissions corral checks for, no more and no fewer.
func TestDocsRoleIsExact(t *testing.T) {
	var granted []string
	for _, r := range docsRole(t).Rules {
		assert.Equal(t, []string{""}, r.APIGroups)
		for _, res := range r.Resources {
			for _, v := range r.Verbs {
				granted = append(granted, v+" "+res)
			}
		}
	}
	var needed []string
	for _, p := range append(slices.Clip(podPermissions), sandboxPermissions...) {
		needed = append(needed, p.String())
	}
	assert.ElementsMatch(t, needed, granted)
}

// TestDocsRoleOnCluster: a user granted the Role of docs/backends.md, and
// nothing else, may use both target forms.
func TestDocsRoleOnCluster(t *testing.T) {
	c := k8stest.Cluster(t)
	ns := c.Namespace(t)
	kc := c.LimitedKubeconfig(t, ns, docsRole(t).Rules)
	r := Check(context.Background(), kc, "", ns)
	assert.True(t, r.OK(), "%+v", r)
}
