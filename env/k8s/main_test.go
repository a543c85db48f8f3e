package k8s

import (
	"os"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// TestMain drops client-go's klog lines, as the plugin does: it logs every
// stream's closed connection, which is how every exec here ends.
func TestMain(m *testing.M) {
	klog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}
