package integration

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env/ssh/sshtest"
	"github.com/corralhq/corral/internal/testing/proctest"
)

// TestCorralRunSSH runs the corral binary against a real sshd the way a
// user would: `corral run --backend ssh://user@127.0.0.1:PORT -- CMD`, with
// nothing but a HOME whose ~/.ssh holds the identity and known_hosts (no
// agent, no flags). Exit codes, the merged output, stdin, the timeout
// kill of the remote tree and the refusal of an unknown host must hold as
// they do locally.
func TestCorralRunSSH(t *testing.T) {
	sshtest.Require(t) // skips, or fails under CORRAL_REQUIRE_SSH=1
	srv := sshtest.Start(t)
	bin := buildCorral(t)

	homeWith := func(knownHosts bool) []string {
		home := t.TempDir()
		dotSSH := filepath.Join(home, ".ssh")
		require.NoError(t, os.MkdirAll(dotSSH, 0o700))
		copyFile(t, srv.ClientKey, filepath.Join(dotSSH, "id_ed25519"), 0o600)
		if knownHosts {
			copyFile(t, srv.KnownHosts, filepath.Join(dotSSH, "known_hosts"), 0o600)
		}
		environ := slices.DeleteFunc(os.Environ(), func(kv string) bool {
			return strings.HasPrefix(kv, "HOME=") || strings.HasPrefix(kv, "SSH_AUTH_SOCK=") ||
				strings.HasPrefix(kv, "CORRAL_")
		})
		// In process: the ssh settings of this HOME apply, not those of the
		// package's shared daemon (TestMain).
		return append(environ, "HOME="+home, "CORRAL_NO_AUTOSTART=1", "CORRAL_NO_DAEMON=1")
	}
	known := homeWith(true)

	t.Run("exit code and both streams", func(t *testing.T) {
		t.Parallel()
		r := runCorralEnv(t, bin, known, nil, "run", "--backend", srv.Target(), "--",
			"sh", "-c", "echo hi from ssh; echo to stderr >&2; exit 3")
		// The streams are merged, in order, on stdout (README: corral run).
		require.Truef(t, r.code == 3 && r.stdout == "hi from ssh\nto stderr\n" && r.stderr == "", "exit %d stdout %q stderr %q, want 3 and both lines on stdout", r.code, r.stdout, r.stderr)
	})

	t.Run("stdin with --stdin", func(t *testing.T) {
		t.Parallel()
		r := runCorralEnv(t, bin, known, strings.NewReader("hello\nworld\n"), "run", "--stdin", "--backend", srv.Target(), "--", "tr a-z A-Z")
		require.Truef(t, r.code == 0 && r.stdout == "HELLO\nWORLD\n", "exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	})

	t.Run("timeout kills the remote tree", func(t *testing.T) {
		t.Parallel()
		m := []string{proctest.Marker(), proctest.Marker()}
		t.Cleanup(func() { proctest.KillWith(m...) })
		script := "trap '' TERM; (setsid sleep " + m[0] + " &); sleep " + m[1]
		r := runCorralEnv(t, bin, known, nil, "run", "--backend", srv.Target(), "--timeout", "2s", "--grace", "1s", "--", "sh", "-c", script)
		require.Truef(t, r.code == 124, "exit %d stdout %q stderr %q, want 124", r.code, r.stdout, r.stderr)
		cliRequireOneLine(t, r.stderr, "timeout", "2s", "killed the process tree")
		// The kill is verified before corral exits; a dying process may
		// take a moment to leave the process table.
		deadline := time.Now().Add(10 * time.Second)
		for _, marker := range m {
			for len(proctest.PIDsWithWord(marker)) > 0 {
				require.Falsef(t, time.Now().After(deadline), "`sleep %s` still runs on the ssh host after the timeout kill", marker)
				time.Sleep(50 * time.Millisecond)
			}
		}
	})

	t.Run("memory limit is an OOM kill named as one", func(t *testing.T) {
		t.Parallel()
		// The test sshd logs in as the user running the tests: root in CI,
		// who may write the host's cgroups.
		if os.Geteuid() != 0 && os.Getenv("CORRAL_REQUIRE_LIMITS") != "1" {
			t.Skip("per-process limits over ssh need a user who may write a cgroup: run as root, or set CORRAL_REQUIRE_LIMITS=1 to fail instead")
		}
		r := runCorralEnv(t, bin, known, nil, "run", "--backend", srv.Target(), "--memory", "64M", "--pids", "64", "--",
			"sh", "-c", `x=$(head -c 200000000 /dev/zero | tr "\0" a); echo survived`)
		require.Truef(t, r.code == 137 && !strings.Contains(r.stdout, "survived"), "exit %d stdout %q stderr %q, want 137", r.code, r.stdout, r.stderr)
		cliRequireOneLine(t, r.stderr, "out of memory (limit 64M)")
	})

	t.Run("unknown host is refused with its fingerprint", func(t *testing.T) {
		t.Parallel()
		m := proctest.Marker()
		t.Cleanup(func() { proctest.KillWith(m) })
		r := runCorralEnv(t, bin, homeWith(false), nil, "run", "--backend", srv.Target(), "--", "sleep "+m)
		require.Truef(t, r.code == 125, "exit %d stdout %q stderr %q, want 125", r.code, r.stdout, r.stderr)
		cliRequireOneLine(t, r.stderr, "unknown", "SHA256:", "ssh-keyscan -p")
		pids := proctest.PIDsWithWord(m)
		require.Truef(t, len(pids) <= 0, "the command ran on a host whose key was never verified: pids %v", pids)
	})
}
