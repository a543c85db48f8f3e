package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestThinClient guards what the corral command links: the daemon's
// client and the command line, nothing of the backends. Every package
// linked runs its initialisation at each call; the Docker SDK, x/crypto/ssh,
// gRPC and protobuf (plugins), the MCP and ACP SDKs and client-go cost a
// `corral version` about 7 ms of its 9 ms. They belong in corrald.
func TestThinClient(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list the dependencies with")
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/corralhq/corral/daemon", "the thin client talks to the daemon")
	banned := []string{
		"github.com/corralhq/corral/env/local", "github.com/corralhq/corral/env/docker", "github.com/corralhq/corral/env/ssh",
		"github.com/corralhq/corral/env/nohup", "github.com/corralhq/corral/env/k8s", "github.com/corralhq/corral/plugins",
		"github.com/corralhq/corral/mcp", "github.com/corralhq/corral/acpterm", "github.com/corralhq/corral/internal/backends",
		"github.com/corralhq/corral/internal/engine",
		"github.com/moby/", "github.com/docker/docker", "golang.org/x/crypto/ssh", "github.com/hashicorp/go-plugin",
		"google.golang.org/grpc", "google.golang.org/protobuf", "github.com/modelcontextprotocol/", "github.com/coder/acp-go-sdk",
		"k8s.io/",
	}
	for _, dep := range deps {
		if dep == "github.com/corralhq/corral/env/local/secrets" {
			continue // the credential filter, which the client applies to what it sends
		}
		for _, b := range banned {
			if dep == b || strings.HasSuffix(b, "/") && strings.HasPrefix(dep, b) || strings.HasPrefix(dep, b+"/") {
				t.Errorf("cmd/corral links %s: keep the backends in corrald (internal/engine, internal/backends)", dep)
			}
		}
	}
}
