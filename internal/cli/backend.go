package cli

import (
	"fmt"
	"strings"

	"github.com/corralhq/corral/internal/targets"
)

// checkBackend rejects a --backend value that cannot name a backend,
// before anything starts, so a typo is a usage error rather than a failed
// run. With the engine it checks all of it (the target's syntax, the
// plugin installed); the thin command leaves that to the daemon, which
// refuses a bad target as a usage error too, before anything starts.
func checkBackend(target string) error {
	if engine != nil {
		return engine.Check(target)
	}
	_, _, hasScheme := strings.Cut(target, "://")
	switch {
	case target == "local", hasScheme:
		return nil
	case target == "":
		return fmt.Errorf("--backend is empty: use %s", targets.Help)
	default:
		return fmt.Errorf("backend %q not available: use %s or a plugin's NAME://", target, targets.Help)
	}
}
