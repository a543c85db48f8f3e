package cli

import (
	"fmt"
	"strings"
)

// defaultBackend is used when --backend is not given.
const defaultBackend = "local"

// backendHelp lists the targets this build accepts, for flag help and
// error messages (the same as internal/backends.Help, which a test keeps
// in step).
const backendHelp = `"local", "docker://CONTAINER", "docker-image://IMAGE[?options]", "ssh://[user@]host[:port]", "k8s://NAMESPACE/POD[/CONTAINER]" or "k8s-pod://IMAGE[?options]"`

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
		return fmt.Errorf("--backend is empty: use %s", backendHelp)
	default:
		return fmt.Errorf("backend %q not available: use %s or a plugin's NAME://", target, backendHelp)
	}
}
