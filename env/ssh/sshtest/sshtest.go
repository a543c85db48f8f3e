// Package sshtest starts a real OpenSSH sshd for tests: on 127.0.0.1 and a
// free port, as a child of the test, with its host keys, authorized key,
// known_hosts and an ssh_config for it in t.TempDir(). It needs
// /usr/sbin/sshd (Debian's openssh-server); without it tests are skipped,
// unless CORRAL_REQUIRE_SSH=1 makes that a failure.
//
// The package does not import the ssh backend, so the backend's own tests
// can use it.
package sshtest

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	xssh "golang.org/x/crypto/ssh"
)

// SSHD is the daemon's path; sshd re-executes itself and so must be started
// by absolute path.
const SSHD = "/usr/sbin/sshd"

// Require skips the test when sshd is not installed, or fails it when
// CORRAL_REQUIRE_SSH=1 (CI installs openssh-server and must not skip).
func Require(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(SSHD); err != nil {
		msg := fmt.Sprintf("sshd not available (%v): install Debian's openssh-server (apt-get install -y openssh-server)", err)
		if os.Getenv("CORRAL_REQUIRE_SSH") == "1" {
			t.Fatal(msg + "; CORRAL_REQUIRE_SSH=1 forbids skipping")
		}
		t.Skip(msg)
	}
}

// Config adjusts the server. The zero value is a server like OpenSSH's
// defaults: MaxSessions 10, ed25519 and ECDSA host keys.
type Config struct {
	// MaxSessions per connection (default 10, OpenSSH's default).
	MaxSessions int
	// Extra is appended to sshd_config verbatim.
	Extra string
}

// Server is a running sshd.
type Server struct {
	Host string // 127.0.0.1
	Port int
	User string // the user tests log in as (the current user)
	Dir  string // everything of this server lives here

	// KnownHosts is a known_hosts file with every host key of the server
	// for [127.0.0.1]:Port.
	KnownHosts string
	// HostKeys are the server's public host keys (ed25519, then ECDSA).
	HostKeys []xssh.PublicKey
	// ClientKey is an unencrypted ed25519 private key file the server
	// accepts; ClientSigner is the same key.
	ClientKey    string
	ClientSigner xssh.Signer
	// SSHConfig is an ssh_config file that makes the alias Alias (and
	// Host:Port) reach this server with ClientKey and KnownHosts, with no
	// agent: usable by the backend and by OpenSSH's ssh -F.
	SSHConfig string
	// Alias is the Host alias SSHConfig defines.
	Alias string

	cfg            Config
	configFile     string
	authorizedKeys string
	logFile        string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
}

// Start starts sshd with the default Config; t.Cleanup stops it.
func Start(t testing.TB) *Server { return StartWith(t, Config{}) }

// StartWith starts sshd with cfg; t.Cleanup stops it.
func StartWith(t testing.TB, cfg Config) *Server {
	t.Helper()
	Require(t)
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 10
	}
	dir := t.TempDir()
	// Privilege separation needs its empty directory, as the Debian package
	// creates it at boot.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil && os.Geteuid() == 0 {
		t.Fatalf("sshtest: %v", err)
	}
	s := &Server{Host: "127.0.0.1", User: currentUser(), Dir: dir, cfg: cfg, Alias: "sshtest"}

	for _, typ := range []string{"ed25519", "ecdsa"} {
		path := filepath.Join(dir, "host_"+typ)
		pub := writeHostKey(t, path, typ)
		s.HostKeys = append(s.HostKeys, pub)
	}
	s.ClientKey = filepath.Join(dir, "client_ed25519")
	s.ClientSigner = WriteKey(t, s.ClientKey, "").Signer
	s.authorizedKeys = filepath.Join(dir, "authorized_keys")
	s.Authorize(t, s.ClientSigner.PublicKey())
	s.logFile = filepath.Join(dir, "sshd.log")

	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		s.Port = freePort(t)
		s.writeConfig(t)
		if lastErr = s.start(); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("sshtest: start sshd: %v", lastErr)
	}
	t.Cleanup(s.Stop)

	s.KnownHosts = filepath.Join(dir, "known_hosts")
	var kh strings.Builder
	for _, k := range s.HostKeys {
		fmt.Fprintf(&kh, "[%s]:%d %s", s.Host, s.Port, xssh.MarshalAuthorizedKey(k))
	}
	writeFile(t, s.KnownHosts, kh.String(), 0o600)

	s.SSHConfig = filepath.Join(dir, "ssh_config")
	writeFile(t, s.SSHConfig, fmt.Sprintf(`Host %s %s
  HostName %s
  Port %d
  User %s
  IdentityFile %s
  IdentitiesOnly yes
  IdentityAgent none
  UserKnownHostsFile %s
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  BatchMode yes
  LogLevel ERROR
`, s.Alias, s.Host, s.Host, s.Port, s.User, s.ClientKey, s.KnownHosts), 0o600)
	return s
}

// Target is ssh://User@127.0.0.1:Port.
func (s *Server) Target() string {
	return fmt.Sprintf("ssh://%s@%s", s.User, s.Addr())
}

// Addr is 127.0.0.1:Port.
func (s *Server) Addr() string { return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) }

// Authorize adds pub to the keys the server accepts.
func (s *Server) Authorize(t testing.TB, pub xssh.PublicKey) {
	t.Helper()
	f, err := os.OpenFile(s.authorizedKeys, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatalf("sshtest: %v", err)
	}
	defer f.Close()
	if _, err := f.Write(xssh.MarshalAuthorizedKey(pub)); err != nil {
		t.Fatalf("sshtest: %v", err)
	}
}

// Log returns what sshd logged so far, for failure messages.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.logFile)
	return string(b)
}

func (s *Server) writeConfig(t testing.TB) {
	t.Helper()
	conf := fmt.Sprintf(`Port %d
ListenAddress %s
HostKey %s
HostKey %s
PidFile %s
AuthorizedKeysFile %s
StrictModes no
UsePAM no
PermitRootLogin yes
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
MaxSessions %d
MaxStartups 100:30:200
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
AllowTcpForwarding yes
LogLevel INFO
# bash sources ~/.bashrc for commands run by sshd when it is a top-level
# shell (SHLVL<2); a heavy .bashrc (pyenv, nvm) on the test machine would
# add its cost to every session and drown the backend's own latency.
SetEnv SHLVL=1
%s
`, s.Port, s.Host, filepath.Join(s.Dir, "host_ed25519"), filepath.Join(s.Dir, "host_ecdsa"),
		filepath.Join(s.Dir, "sshd.pid"), s.authorizedKeys, s.cfg.MaxSessions, s.cfg.Extra)
	s.configFile = filepath.Join(s.Dir, "sshd_config")
	writeFile(t, s.configFile, conf, 0o600)
}

// start runs sshd and waits until it listens (it logs "Server listening").
func (s *Server) start() error {
	log, err := os.OpenFile(s.logFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	offset, _ := log.Seek(0, 2)
	cmd := exec.Command(SSHD, "-D", "-e", "-f", s.configFile)
	cmd.Stdout = log
	cmd.Stderr = log
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.SysProcAttr = daemonAttr()
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if logged(s.logFile, offset, "Server listening on") {
			break
		}
		select {
		case <-done:
			return fmt.Errorf("sshd exited at start: %s", tail(s.logFile, offset))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			return fmt.Errorf("sshd did not listen within 20s: %s", tail(s.logFile, offset))
		}
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return nil
}

// Stop kills sshd and every connection it serves (their sshd processes),
// which cuts all client connections at once. The commands those
// connections started are not touched. Idempotent.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	killConnections(cmd.Process.Pid)
	cmd.Process.Kill()
	<-done
}

// Restart stops sshd, cutting every connection, and starts it again on the
// same port with the same keys.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = s.start(); err == nil {
			return
		}
		// The port may linger for a moment; sshd sets SO_REUSEADDR,
		// so this is rare.
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("sshtest: restart sshd on port %d: %v", s.Port, err)
}

// RotateHostKeys gives the server new host keys and restarts it, as a
// reinstalled host or a man in the middle would present itself.
// KnownHosts and HostKeys keep describing the old keys.
func (s *Server) RotateHostKeys(t testing.TB) {
	t.Helper()
	for _, typ := range []string{"ed25519", "ecdsa"} {
		writeHostKey(t, filepath.Join(s.Dir, "host_"+typ), typ)
	}
	s.Restart(t)
}

func logged(file string, offset int64, needle string) bool {
	f, err := os.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	if _, err := f.Seek(offset, 0); err != nil {
		return false
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.Contains(sc.Text(), needle) {
			return true
		}
	}
	return false
}

func tail(file string, offset int64) string {
	b, _ := os.ReadFile(file)
	if int64(len(b)) > offset {
		b = b[offset:]
	}
	return strings.TrimSpace(string(b))
}

// Key is a client key written by WriteKey.
type Key struct {
	Path    string             // private key file; Path+".pub" holds the public key
	Private ed25519.PrivateKey // for loading into an agent
	Signer  xssh.Signer
}

// WriteKey generates an ed25519 key, writes the private key to path in
// OpenSSH format (encrypted when passphrase is not empty) and the public
// key to path.pub.
func WriteKey(t testing.TB, path, passphrase string) Key {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("sshtest: %v", err)
	}
	var block *pem.Block
	if passphrase == "" {
		block, err = xssh.MarshalPrivateKey(priv, "sshtest")
	} else {
		block, err = xssh.MarshalPrivateKeyWithPassphrase(priv, "sshtest", []byte(passphrase))
	}
	if err != nil {
		t.Fatalf("sshtest: %v", err)
	}
	writeFile(t, path, string(pem.EncodeToMemory(block)), 0o600)
	signer, err := xssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatalf("sshtest: %v", err)
	}
	writeFile(t, path+".pub", string(xssh.MarshalAuthorizedKey(signer.PublicKey())), 0o644)
	return Key{Path: path, Private: priv, Signer: signer}
}

func writeHostKey(t testing.TB, path, typ string) xssh.PublicKey {
	t.Helper()
	var key any
	switch typ {
	case "ed25519":
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatalf("sshtest: %v", err)
		}
		key = priv
	case "ecdsa":
		priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatalf("sshtest: %v", err)
		}
		key = priv
	default:
		t.Fatalf("sshtest: unknown host key type %q", typ)
	}
	block, err := xssh.MarshalPrivateKey(key, "")
	if err != nil {
		t.Fatalf("sshtest: %v", err)
	}
	writeFile(t, path, string(pem.EncodeToMemory(block)), 0o600)
	signer, err := xssh.NewSignerFromKey(key)
	if err != nil {
		t.Fatalf("sshtest: %v", err)
	}
	return signer.PublicKey()
}

func writeFile(t testing.TB, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatalf("sshtest: %v", err)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("sshtest: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func currentUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return "root"
}
