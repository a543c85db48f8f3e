package local

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// helperRoles maps an environment variable to a role the test binary
// takes instead of running the tests when the variable is set. Files for
// one OS add their roles in init, so the package's tests build on every
// OS (the OOM supervisor is Linux-only, the Windows ones Windows-only).
var helperRoles = map[string]func() int{
	// The helper supervisor of the re-attach test (the shim role is
	// taken in this package's init).
	helperEnvVar: helperMain,
}

func TestMain(m *testing.M) {
	for name, role := range helperRoles {
		if os.Getenv(name) != "" {
			os.Exit(role())
		}
	}
	goleak.VerifyTestMain(m)
}
