package sdk

import (
	"testing"

	"go.uber.org/goleak"
)

// The server's handlers run in goroutines of their own (Run streams, Output
// streams, releases after a stream ends): none may outlive the test that
// started it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
