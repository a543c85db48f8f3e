package local

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The test binary doubles as the helper supervisor of the re-attach
	// test (the shim role is taken in this package's init).
	if os.Getenv(helperEnvVar) != "" {
		os.Exit(helperMain())
	}
	if os.Getenv(oomHelperEnvVar) != "" {
		os.Exit(oomHelperMain())
	}
	goleak.VerifyTestMain(m)
}
