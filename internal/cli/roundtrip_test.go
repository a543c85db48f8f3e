package cli

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/daemon"
	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/registry"
)

// TestRunIsOneRoundTrip: a foreground run through the daemon is one
// request, POST /v1/run, whose stream brings the start, the output and
// the exit: no status call first. The daemon here is a stand-in that
// records what it is asked; the real one is the integration tests'.
func TestRunIsOneRoundTrip(t *testing.T) {
	// A short path: a unix socket's must fit in 108 bytes.
	dir, err := os.MkdirTemp("", "crt")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "d.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	var (
		mu   sync.Mutex
		asks []string
	)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asks = append(asks, r.Method+" "+r.URL.Path)
		mu.Unlock()
		if r.URL.Path != daemon.APIVersion+"/run" {
			http.Error(w, `{"error":"only run here","code":"not_found"}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		info := registry.Info{ID: "proc_0123456789ab", State: registry.StateRunning}
		started, _ := json.Marshal(info)
		info.State, info.Status = registry.StateExited, &env.ExitStatus{Code: 3}
		end, _ := json.Marshal(daemon.RunEnd{RunResult: registry.RunResult{Info: info}})
		fmt.Fprintf(w, "event: started\ndata: %s\n\nevent: output\ndata: {\"offset\":0,\"data\":\"aGkK\"}\n\nevent: end\ndata: %s\n\n", started, end)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	t.Setenv("CORRAL_SOCKET", sock)
	t.Setenv(noDaemonEnv, "")

	code, out, errOut := corral(t, "", "run", "--", "true")
	assert.Equal(t, 3, code, "stderr %q", errOut)
	assert.Equal(t, "hi\n", out)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"POST " + daemon.APIVersion + "/run"}, asks, "the requests the run made")
}
