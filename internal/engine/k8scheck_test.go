package engine

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeK8sPlugin writes an executable shell script named
// corral-backend-k8s into a directory of its own on CORRAL_PLUGIN_PATH: it
// records its arguments and environment beside itself, then runs body.
// It stands for the plugin's check only (it speaks no plugin protocol):
// what is tested is how corral runs the check and words its report.
func fakeK8sPlugin(t *testing.T, body string) (dir string) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("needs /bin/sh")
	}
	dir = t.TempDir()
	// Started as a plugin (corral doctor's and backends' probe) it fails.
	script := "#!/bin/sh\n" +
		`[ "$1" = check ] || exit 1` + "\n" +
		`d=$(dirname "$0"); echo "$@" > "$d/args"; env > "$d/env"; pwd > "$d/pwd"` + "\n" + body + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "corral-backend-k8s"), []byte(script), 0o700))
	t.Setenv("CORRAL_PLUGIN_PATH", dir)
	t.Setenv("HOME", t.TempDir()) // no stray plugins from ~/.local/share
	return dir
}

// report is a check's JSON as a shell body that prints it and exits code.
func report(t *testing.T, r k8sReport, code string) string {
	b, err := json.Marshal(r)
	require.NoError(t, err)
	return "cat <<'EOF'\n" + string(b) + "\nEOF\nexit " + code
}

func doctorProbes(t *testing.T) map[string]probe {
	t.Helper()
	code, stdout, stderr := corral(t, "", "doctor", "--json")
	require.Equal(t, 0, code, stderr)
	var probes []probe
	require.NoError(t, json.Unmarshal([]byte(stdout), &probes))
	found := map[string]probe{}
	for _, p := range probes {
		found[p.Name] = p
	}
	return found
}

// backendsClusterLine is the "cluster …" line under k8s in corral
// backends.
func backendsClusterLine(t *testing.T) string {
	t.Helper()
	code, stdout, stderr := corral(t, "", "backends")
	require.Equal(t, 0, code, stderr)
	for l := range strings.SplitSeq(stdout, "\n") {
		if strings.HasPrefix(l, "    cluster ") {
			return strings.TrimPrefix(l, "    ")
		}
	}
	require.FailNow(t, "no cluster line in corral backends", stdout)
	return ""
}

// TestKubernetesCheck: corral doctor runs the plugin's check with only
// HOME, PATH and the Kubernetes variables of its environment, and words
// its JSON report in one line (ok, what each target form lacks, the error,
// no cluster); corral backends shows the same line under the k8s plugin.
func TestKubernetesCheck(t *testing.T) {
	ok := k8sReport{Context: "corral-test", Server: "https://127.0.0.1:6443", Version: "v1.34.4", Namespace: "ci"}

	t.Run("ok", func(t *testing.T) {
		dir := fakeK8sPlugin(t, report(t, ok, "0"))
		t.Setenv("KUBECONFIG", "/etc/corral-test/kubeconfig")
		t.Setenv("CORRAL_TEST_SECRET", "s3cret")
		p := doctorProbes(t)["kubernetes"]
		assert.True(t, p.OK, "%+v", p)
		assert.Equal(t, "context corral-test, server https://127.0.0.1:6443, v1.34.4; k8s:// and k8s-pod:// allowed in namespace ci", p.Detail)

		args, err := os.ReadFile(filepath.Join(dir, "args"))
		require.NoError(t, err)
		assert.Equal(t, "check\n", string(args))
		env, err := os.ReadFile(filepath.Join(dir, "env"))
		require.NoError(t, err)
		assert.Contains(t, string(env), "KUBECONFIG=/etc/corral-test/kubeconfig\n")
		assert.Contains(t, string(env), "HOME=")
		assert.NotContains(t, string(env), "s3cret", "the check gets none of corral's other variables")
		pwd, err := os.ReadFile(filepath.Join(dir, "pwd"))
		require.NoError(t, err)
		assert.Equal(t, "/\n", string(pwd), "the check runs where the plugin would")

		assert.Equal(t, "cluster ok: "+p.Detail, backendsClusterLine(t))
	})

	t.Run("sandbox forbidden", func(t *testing.T) {
		r := ok
		r.MissingSandbox = []string{"create pods", "delete pods"}
		fakeK8sPlugin(t, report(t, r, "1"))
		p := doctorProbes(t)["kubernetes"]
		assert.False(t, p.OK)
		assert.Contains(t, p.Detail, "v1.34.4; k8s:// allowed in namespace ci, k8s-pod:// lacks create pods, delete pods; grant them with a Role")
	})

	t.Run("exec forbidden", func(t *testing.T) {
		r := ok
		r.Missing = []string{"get pods/exec", "create pods/exec"}
		r.MissingSandbox = []string{"get pods/exec", "create pods/exec", "create pods"}
		fakeK8sPlugin(t, report(t, r, "1"))
		p := doctorProbes(t)["kubernetes"]
		assert.False(t, p.OK)
		assert.Contains(t, p.Detail, "in namespace ci k8s:// lacks get pods/exec, create pods/exec, k8s-pod:// lacks get pods/exec, create pods/exec, create pods; grant")
		assert.Equal(t, "cluster missing: "+p.Detail, backendsClusterLine(t))
	})

	t.Run("unreachable", func(t *testing.T) {
		r := k8sReport{Context: "x", Server: "https://192.0.2.1:6443", Err: "k8s: cannot reach the API server https://192.0.2.1:6443 of context x (connection refused); check that the cluster runs"}
		fakeK8sPlugin(t, report(t, r, "1"))
		p := doctorProbes(t)["kubernetes"]
		assert.False(t, p.OK)
		assert.Equal(t, r.Err, p.Detail)
	})

	t.Run("no cluster", func(t *testing.T) {
		fakeK8sPlugin(t, report(t, k8sReport{NoCluster: true, Err: "k8s: no cluster configured"}, "1"))
		p := doctorProbes(t)["kubernetes"]
		assert.False(t, p.OK)
		assert.Equal(t, "skipped", p.Status)
		assert.Equal(t, "no cluster configured (KUBECONFIG, ~/.kube/config)", p.Detail)
		assert.Equal(t, "cluster skipped: "+p.Detail, backendsClusterLine(t))
	})

	t.Run("crash", func(t *testing.T) {
		fakeK8sPlugin(t, "echo 'panic: boom' >&2; echo 'goroutine 1' >&2; exit 2")
		p := doctorProbes(t)["kubernetes"]
		assert.False(t, p.OK)
		assert.Contains(t, p.Detail, "check failed (exit status 2): panic: boom")
		assert.NotContains(t, p.Detail, "goroutine")
	})

	t.Run("not installed", func(t *testing.T) {
		t.Setenv("CORRAL_PLUGIN_PATH", t.TempDir())
		t.Setenv("HOME", t.TempDir())
		p := doctorProbes(t)["kubernetes"]
		assert.Equal(t, "skipped", p.Status)
		assert.Contains(t, p.Detail, "make build puts bin/corral-backend-k8s beside corral")
	})
}

func TestK8sProbeWording(t *testing.T) {
	p := k8sProbe(k8sReport{Err: "k8s: kubeconfig: context \"nope\" does not exist"})
	assert.False(t, p.OK)
	assert.Empty(t, p.Status)
	assert.Equal(t, "missing", probeMark(p))
	assert.Equal(t, `k8s: kubeconfig: context "nope" does not exist`, p.Detail)
}
