package mcp

import (
	"fmt"
	"testing"

	"github.com/corralhq/corral/internal/errclass"
)

// TestEveryClassHasAToolHint walks every error class: a class added to
// errclass and not to toolHints fails here. The tool error is the
// registry's message, without its package prefix, plus the hint.
func TestEveryClassHasAToolHint(t *testing.T) {
	for _, c := range errclass.Classes() {
		hint, ok := toolHints[c]
		if !ok {
			t.Errorf("class %v: no entry in toolHints (\"\" for none)", c)
			continue
		}
		want := "poll: op: test"
		if hint != "" {
			want += " (" + hint + ")"
		}
		if got := toolError("poll", fmt.Errorf("registry: op: %w", errclass.New(c, "test"))).Error(); got != want {
			t.Errorf("class %v: tool error %q, want %q", c, got, want)
		}
	}
}
