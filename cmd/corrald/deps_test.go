package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNoClientGo: corrald never links client-go, whose package
// initialisation registers every Kubernetes API type at each start (the
// Kubernetes backend is the corral-backend-k8s plugin, started only for a
// k8s:// or k8s-pod:// target).
func TestNoClientGo(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list the dependencies with")
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for dep := range strings.FieldsSeq(string(out)) {
		if strings.HasPrefix(dep, "k8s.io/") || dep == "github.com/corralhq/corral/env/k8s" {
			t.Errorf("cmd/corrald depends on %s: keep Kubernetes code in cmd/corral-backend-k8s", dep)
		}
	}
}
