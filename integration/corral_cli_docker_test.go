package integration

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCorralRunDocker runs the corral binary against a Docker sandbox: the
// CLI's backend resolver, exit codes and timeout kill must hold there as
// they do locally. The sandbox is kept (persist=true) so the test can look
// inside it after corral exited, and removed by the test.
func TestCorralRunDocker(t *testing.T) {
	cli := requireDocker(t) // builds the test image; skips or fails without an engine
	bin := buildCorral(t)
	name := fmt.Sprintf("corral-cli-test-%08x", rand.Uint32())
	t.Cleanup(func() { removeContainer(cli, name) })
	target := "docker-image://" + dockerTestImage + "?network=none&persist=true&name=" + name

	r := runCorral(t, bin, nil, "run", "--backend", target, "--", "sh", "-c", "echo hi from the sandbox; exit 3")
	require.Truef(t, r.code == 3 && r.stdout == "hi from the sandbox\n", "exit %d stdout %q stderr %q, want 3 and the output", r.code, r.stdout, r.stderr)

	marker := fmt.Sprintf("%d.%04d", 300+rand.IntN(600), rand.IntN(10000))
	script := fmt.Sprintf(`trap "" TERM; (setsid sleep %s &); sleep %s`, marker, marker)
	r = runCorral(t, bin, nil, "run", "--backend", target, "--timeout", "2s", "--grace", "1s", "--", "sh", "-c", script)
	require.Truef(t, r.code == 124, "exit %d stdout %q stderr %q, want 124", r.code, r.stdout, r.stderr)
	cliRequireOneLine(t, r.stderr, "timeout", "2s", "killed the process tree")
	// The kill is verified before corral exits; allow a dying process a
	// moment to leave the container's process table.
	deadline := time.Now().Add(10 * time.Second)
	for {
		found, _ := topHas(t, cli, name, "sleep "+marker)
		if !found {
			break
		}
		require.Falsef(t, time.Now().After(deadline), "`sleep %s` still runs in container %s after the timeout kill", marker, name)
		time.Sleep(100 * time.Millisecond)
	}

	r = runCorral(t, bin, nil, "run", "--backend", "docker://no-such-container-"+name, "--", "true")
	require.Truef(t, r.code == 125, "missing container: exit %d stderr %q, want 125", r.code, r.stderr)
	cliRequireOneLine(t, r.stderr, "no-such-container-"+name)
	require.Falsef(t, strings.Contains(r.stderr, "panic"), "stderr %q", r.stderr)
}
