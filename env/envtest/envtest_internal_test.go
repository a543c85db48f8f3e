package envtest

import "testing"

func TestKnownCase(t *testing.T) {
	if !knownCase("Output/Large50MB") || !knownCase("Exit/ConcurrentStarts100") {
		t.Error("a case of the suite is not known")
	}
	for _, name := range []string{"Large50MB", "Output/Large", "Nope/Large50MB", ""} {
		if knownCase(name) {
			t.Errorf("knownCase(%q) = true", name)
		}
	}
}
