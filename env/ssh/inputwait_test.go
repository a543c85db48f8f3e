package ssh

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/ssh/sshtest"
	"github.com/corralhq/corral/internal/shellquote"
	"github.com/corralhq/corral/internal/testing/syncbuf"
)

// TestInputWaitsPrograms: the programs the issue names, on an ssh host
// (this machine's sshd, so its programs), each flagged with its kind once
// its prompt is up and unflagged once answered, as env/local's own test
// does on the machine: the sandbox's shell library sees what the kernel
// says through /proc, not the prompt's text. A program this machine lacks
// is skipped, saying so.
func TestInputWaitsPrograms(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sshd and real prompting programs")
	}
	sshtest.Require(t)
	srv := sshtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := Open(ctx, srv.Target(), serverOptions(t, srv))
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	iw := e.(env.InputWatcher)

	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	require.NoError(t, os.WriteFile(victim, []byte("x"), 0o600))
	pager := filepath.Join(dir, "pager.txt")
	require.NoError(t, os.WriteFile(pager, []byte(strings.Repeat("PAGER-LINE\n", 200)), 0o600))
	nodeQ := `const rl=require("readline").createInterface({input:process.stdin,output:process.stdout});rl.question("Node name? ",a=>{rl.close();process.exit(0)})`
	const answered = "ANSWERED-OK"
	for _, c := range []struct {
		name, needs, command, ready, kind, answer string
		pty                                       bool
	}{
		{"python input pty", "python3", `python3 -c 'input("Py name? ")'`, "Py name? ", env.InputLine, "bob\n", true},
		{"python input pipe", "python3", `python3 -c 'input("Py name? ")'`, "Py name? ", env.InputPipe, "bob\n", false},
		{"python getpass", "python3", `python3 -c 'import getpass; getpass.getpass("Py secret: ")'`, "Py secret: ", env.InputPassword, "hunter2\n", true},
		{"node readline pty", "node", `node -e ` + shellquote.Quote(nodeQ), "Node name? ", env.InputRaw, "bob\r", true},
		{"node readline pipe", "node", `node -e ` + shellquote.Quote(nodeQ), "Node name? ", env.InputPipe, "bob\n", false},
		{"rm -i", "rm", `rm -i ` + shellquote.Quote(victim), "remove", env.InputLine, "n\n", true},
		// Without TERM (an ssh command's terminal has none) less shows nothing.
		{"less", "less", `TERM=xterm less ` + shellquote.Quote(pager), "PAGER-LINE", env.InputRaw, "q", true},
		{"vim", "vim", `vim -N -u NONE -n ` + shellquote.Quote(pager), "PAGER-LINE", env.InputRaw, "\x1b:q!\r", true},
		{"ssh-keygen", "ssh-keygen", `ssh-keygen -q -t ed25519 -f ` + shellquote.Quote(filepath.Join(dir, "k")), "passphrase", env.InputPassword, "\n", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := exec.LookPath(c.needs); err != nil {
				t.Skipf("%s is not installed on this machine (the ssh host)", c.needs)
			}
			spec := env.Spec{Command: c.command + "; echo " + answered + "; exec sleep 30", Stdin: true}
			if c.pty {
				spec.PTY = &env.DefaultWindowSize
			}
			p, err := e.Start(ctx, spec)
			require.NoError(t, err)
			t.Cleanup(func() {
				_ = p.Signal(context.Background(), env.SIGKILL)
				_ = p.Release()
			})
			out := &syncbuf.Buffer{}
			r, err := p.Output(ctx, 0)
			require.NoError(t, err)
			go func() { _, _ = io.Copy(out, r) }()
			t.Cleanup(func() { _ = r.Close() })
			require.Eventually(t, func() bool { return strings.Contains(out.String(), c.ready) }, 30*time.Second, 20*time.Millisecond, "the prompt; output %q", out.String())
			shown := time.Now()
			var got *env.InputWait
			require.Eventually(t, func() bool {
				ws, err := iw.InputWaits(ctx, []env.Process{p})
				require.NoError(t, err)
				got = ws[0]
				return got != nil
			}, 30*time.Second, 50*time.Millisecond, "flagged; output %q", out.String())
			t.Logf("flagged %s %v after the prompt", got.Kind, time.Since(shown).Round(time.Millisecond))
			require.Equal(t, c.kind, got.Kind)
			// ssh-keygen asks twice: the first answer brings the second.
			for _, more := range []bool{c.name == "ssh-keygen", false} {
				_, err = p.Write(ctx, []byte(c.answer))
				require.NoError(t, err)
				if !more {
					break
				}
				require.Eventually(t, func() bool { return strings.Contains(out.String(), "again") }, 30*time.Second, 20*time.Millisecond)
			}
			require.Eventually(t, func() bool { return strings.Contains(out.String(), answered) }, 30*time.Second, 20*time.Millisecond, "answered; output %q", out.String())
			require.Eventually(t, func() bool {
				ws, err := iw.InputWaits(ctx, []env.Process{p})
				require.NoError(t, err)
				return ws[0] == nil
			}, 30*time.Second, 50*time.Millisecond, "answered, it sleeps: no longer flagged")
		})
	}
}
