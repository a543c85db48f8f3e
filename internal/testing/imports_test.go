// Package testing_test guards the test-support tree: the harnesses under
// internal/testing start processes, servers and agents for tests, and a
// production package that imported one would ship them in the corral
// binary.
package testing_test

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const harnesses = "github.com/corralhq/corral/internal/testing/"

// TestHarnessesOnlyInTests fails when a package's non-test files import a
// harness; only other harnesses may.
func TestHarnessesOnlyInTests(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "github.com/corralhq/corral/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list: %s", stderr.String())
	var bad []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], harnesses) {
			continue
		}
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, harnesses) {
				bad = append(bad, fields[0]+" imports "+imp)
			}
		}
	}
	require.NoError(t, sc.Err())
	require.Empty(t, bad, "production code must not import a test harness; import it from _test.go files only")
}
