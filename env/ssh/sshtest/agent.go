package sshtest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/ssh/agent"
)

// StartAgent starts OpenSSH's ssh-agent in the foreground on a socket in a
// temporary directory, loads keys (private keys as crypto types, e.g.
// ed25519.PrivateKey) into it, and returns the socket path. t.Cleanup
// stops it. Skips (or fails under CORRAL_REQUIRE_SSH=1) without ssh-agent.
func StartAgent(t testing.TB, keys ...any) string {
	t.Helper()
	bin, err := exec.LookPath("ssh-agent")
	if err != nil {
		if os.Getenv("CORRAL_REQUIRE_SSH") == "1" {
			t.Fatalf("sshtest: ssh-agent not found (%v); CORRAL_REQUIRE_SSH=1 forbids skipping", err)
		}
		t.Skipf("sshtest: ssh-agent not found (%v): install openssh-client", err)
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	cmd := exec.Command(bin, "-D", "-a", sock)
	cmd.SysProcAttr = daemonAttr()
	if err := cmd.Start(); err != nil {
		t.Fatalf("sshtest: start ssh-agent: %v", err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})

	deadline := time.Now().Add(10 * time.Second)
	var conn net.Conn
	for {
		if conn, err = net.Dial("unix", sock); err == nil {
			break
		}
		select {
		case <-done:
			t.Fatalf("sshtest: ssh-agent exited at start")
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("sshtest: ssh-agent did not listen on %s within 10s: %v", sock, err)
		}
	}
	defer conn.Close()
	ac := agent.NewClient(conn)
	for _, k := range keys {
		if err := ac.Add(agent.AddedKey{PrivateKey: k, Comment: "sshtest"}); err != nil {
			t.Fatalf("sshtest: add key to ssh-agent: %v", err)
		}
	}
	return sock
}
