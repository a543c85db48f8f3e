package daemon

import (
	"testing"

	"github.com/corralhq/corral/registry/registrytest"
)

// The registry.Service suite through the daemon: the same tests as in
// process (registry/registrytest), over the socket.
func TestServiceSuite(t *testing.T) {
	c, _ := startDaemon(t)
	registrytest.Run(t, c)
}
