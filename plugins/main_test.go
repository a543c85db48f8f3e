package plugins_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// pluginDir holds the example plugins, built once for the package's tests.
var pluginDir string

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperHostEnv); spec != "" {
		os.Exit(helperHost(spec))
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "corral-plugins-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// MkdirTemp makes 0700 directories: the plugin host's ownership check
	// accepts them.
	for name, pkg := range map[string]string{
		"localplugin": "./examples/corral-backend-localplugin",
		"bwrap":       "./examples/corral-backend-bwrap",
		"hostsh":      "./internal/testplugin", // ServeTransport with stated capabilities
	} {
		if _, err := os.Stat(pkg); err != nil {
			continue
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "corral-backend-"+name), pkg)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n", pkg, err)
			return 1
		}
	}
	pluginDir = dir
	if code := m.Run(); code != 0 {
		return code
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
		return 1
	}
	return 0
}
