package envtest

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestKnownCase(t *testing.T) {
	assert.True(t, knownCase("Output/Large50MB") && knownCase("Exit/ConcurrentStarts100"), "a case of the suite is not known")
	for _, name := range []string{"Large50MB", "Output/Large", "Nope/Large50MB", ""} {
		assert.Falsef(t, knownCase(name), "knownCase(%q) = true", name)
	}
}
