package sshtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// StartControlMaster starts OpenSSH's `ssh -M -N` to s as a child of the
// test (not -f, so it stays the test's to stop) and returns its control
// socket once it answers: `ssh -F s.SSHConfig -S SOCK s.Alias CMD` then
// runs over the warm connection, the baseline a persistent connection is
// measured against. No ssh client skips the test.
func (s *Server) StartControlMaster(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skipf("ssh not installed: %v", err)
	}
	// Short: a unix socket path must fit in 108 bytes.
	dir, err := os.MkdirTemp("", "cm")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "cm.sock")
	cmd := exec.Command("ssh", "-F", s.SSHConfig, "-M", "-N", "-S", sock, "-o", "ControlPersist=no", s.Alias)
	cmd.SysProcAttr = daemonAttr()
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		os.RemoveAll(dir)
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-done:
			t.Fatal("sshtest: ssh ControlMaster exited at start")
		default:
		}
		if _, err := os.Stat(sock); err == nil &&
			exec.Command("ssh", "-F", s.SSHConfig, "-S", sock, "-O", "check", s.Alias).Run() == nil {
			return sock
		}
		if time.Now().After(deadline) {
			t.Fatal("sshtest: the ssh ControlMaster did not come up within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
