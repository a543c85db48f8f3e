package ssh

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	xssh "golang.org/x/crypto/ssh"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/ssh/sshtest"
)

func TestExec(t *testing.T) {
	srv := sshtest.Start(t)
	tr := dialServer(t, srv, serverOptions(t, srv))

	t.Run("stdout stderr and exit code", func(t *testing.T) {
		out, errOut, code := run(t, tr, "echo out; echo err >&2; exit 7", nil)
		require.Truef(t, out == "out\n" && errOut == "err\n" && code == 7, "got stdout %q stderr %q code %d; want out, err, 7", out, errOut, code)
	})
	t.Run("runs under /bin/sh whatever the login shell", func(t *testing.T) {
		// $0 is the shell that runs the script.
		out, _, _ := run(t, tr, `printf %s "$0"`, nil)
		require.Truef(t, out == "/bin/sh", "script ran under %q, want /bin/sh", out)
	})
	t.Run("script with quotes arrives literally", func(t *testing.T) {
		script := `printf '%s\n' "it's" 'a "quoted" $HOME ` + "`x`" + ` \\ ; touch /nonexistent-dir/x'`
		out, _, code := run(t, tr, script, nil)
		want := "it's\na \"quoted\" $HOME `x` \\\\ ; touch /nonexistent-dir/x\n"
		require.Truef(t, out == want && code == 0, "got %q (code %d), want %q", out, code, want)
	})
	t.Run("stdin is copied", func(t *testing.T) {
		out, _, _ := run(t, tr, "tr a-z A-Z", strings.NewReader("hello\n"))
		require.Truef(t, out == "HELLO\n", "got %q, want HELLO", out)
	})
	t.Run("no stdin reads EOF", func(t *testing.T) {
		out, _, code := run(t, tr, "cat; echo done", nil)
		require.Truef(t, out == "done\n" && code == 0, "got %q code %d", out, code)
	})
	t.Run("script that ignores a large stdin", func(t *testing.T) {
		big := bytes.Repeat([]byte("x"), 8<<20)
		_, _, code := run(t, tr, "exit 3", bytes.NewReader(big))
		require.Truef(t, code == 3, "code %d, want 3", code)
	})
	t.Run("large binary output is complete", func(t *testing.T) {
		data := make([]byte, 12<<20)
		rand.Read(data)
		want := sha256.Sum256(data)
		// The data goes up as stdin and comes back through stdout.
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		code, err := tr.Exec(ctx, "cat", bytes.NewReader(data), &out, nil)
		require.Truef(t, err == nil && code == 0, "Exec: code %d err %v", code, err)
		if got := sha256.Sum256(out.Bytes()); got != want || out.Len() != len(data) {
			require.FailNow(t, fmt.Sprintf("got %d bytes with another checksum, want %d bytes", out.Len(), len(data)))
		}
	})
	t.Run("killed by a signal reports 128+N", func(t *testing.T) {
		_, _, code := run(t, tr, "kill -TERM $$", nil)
		require.Truef(t, code == 128+15, "code %d, want %d", code, 128+15)
	})
	t.Run("cancelled context ends the session, not the connection", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		started := make(chan struct{})
		go func() {
			_, err := tr.Exec(ctx, "echo started; exec sleep 300", nil, &signalWriter{ch: started}, nil)
			errc <- err
		}()
		<-started
		cancel()
		err := <-errc
		require.Truef(t, errors.Is(err, context.Canceled), "Exec after cancel: %v, want context.Canceled", err)
		out, _, _ := run(t, tr, "echo still-up", nil)
		require.Truef(t, out == "still-up\n", "connection unusable after a cancelled Exec: %q", out)
	})
	t.Run("closed transport returns ErrReleased", func(t *testing.T) {
		tr2 := dialServer(t, srv, serverOptions(t, srv))
		tr2.Close()
		tr2.Close() // idempotent
		_, err := tr2.Exec(context.Background(), "true", nil, nil, nil)
		require.Truef(t, errors.Is(err, env.ErrReleased), "Exec after Close: %v, want ErrReleased", err)
	})
}

// signalWriter closes ch at the first write.
type signalWriter struct {
	once sync.Once
	ch   chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.ch) })
	return len(p), nil
}

// With every session slot taken, a further Exec waits for a slot and does
// not open a session of its own.
func TestExecQueuesWhenSessionsAreTaken(t *testing.T) {
	srv := sshtest.Start(t)
	opts := serverOptions(t, srv)
	opts.MaxSessions = 2
	tr := dialServer(t, srv, opts)

	release := make(chan struct{})
	var holders sync.WaitGroup
	for i := range 2 {
		holders.Add(1)
		started := make(chan struct{})
		go func() {
			defer holders.Done()
			// Holds its slot until stdin reaches EOF.
			pr, pw := io.Pipe()
			go func() {
				<-release
				pw.Close()
			}()
			_, err := tr.Exec(context.Background(), "echo up; cat >/dev/null", pr, &signalWriter{ch: started}, nil)
			assert.NoErrorf(t, err, "holder %d", i)
		}()
		<-started
	}

	marker := filepath.Join(t.TempDir(), "ran")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := tr.Exec(ctx, "touch "+marker, nil, nil, nil)
	assert.Truef(t, errors.Is(err, context.Canceled) && strings.Contains(err.Error(), "wait for a free session"), "Exec with all slots taken: %v, want it to wait for a free session", err)
	close(release)
	holders.Wait()
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		assert.Fail(t, fmt.Sprintf("the queued script ran: %v", err))
	}
	// Slots are free again.
	out, _, _ := run(t, tr, "echo free", nil)
	require.Truef(t, out == "free\n", "got %q", out)
}

func TestSessionsQueueBeyondMaxSessions(t *testing.T) {
	// The server allows 4 sessions per connection; 40 Execs at once must
	// all succeed by queueing, none refused.
	srv := sshtest.StartWith(t, sshtest.Config{MaxSessions: 4})
	opts := serverOptions(t, srv)
	opts.MaxSessions = 4
	tr := dialServer(t, srv, opts)

	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			code, err := tr.Exec(ctx, fmt.Sprintf("sleep 0.05; echo %d", i), nil, &out, nil)
			if err != nil || code != 0 || out.String() != fmt.Sprintf("%d\n", i) {
				errs <- fmt.Errorf("exec %d: code %d out %q err %v", i, code, out.String(), err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.Fail(t, fmt.Sprint(err))
	}
}

func TestHostKeyUnknownIsRefused(t *testing.T) {
	srv := sshtest.Start(t)
	opts := serverOptions(t, srv)
	opts.KnownHostsFiles = []string{filepath.Join(t.TempDir(), "known_hosts")} // does not exist
	_, err := Dial(context.Background(), srv.Target(), opts)
	require.Truef(t, errors.Is(err, ErrHostKeyUnknown) && !errors.Is(err, ErrHostKeyChanged), "Dial to unknown host: %v, want ErrHostKeyUnknown", err)
	msg := err.Error()
	want := fmt.Sprintf("ssh-keyscan -p %d 127.0.0.1 >> ", srv.Port)
	assert.Truef(t, strings.Contains(msg, want), "error %q does not contain %q", msg, want)
	// The server chose which of its keys to show; the message must carry
	// that key's fingerprint.
	var hke *HostKeyError
	require.Truef(t, errors.As(err, &hke), "%T is not a *HostKeyError", err)
	found := false
	for _, k := range srv.HostKeys {
		if fp := xssh.FingerprintSHA256(k); hke.Fingerprint == fp && strings.Contains(msg, fp) {
			found = true
		}
	}
	assert.Truef(t, found, "error %q does not carry the fingerprint of one of the server's keys", msg)
}

func TestHostKeyChangedIsRefusedEvenWithAcceptNew(t *testing.T) {
	srv := sshtest.Start(t)
	dir := t.TempDir()
	other := sshtest.WriteKey(t, filepath.Join(dir, "other"), "").Signer.PublicKey()
	kh := writeTestFile(t, dir, "known_hosts", fmt.Sprintf("[127.0.0.1]:%d %s", srv.Port, xssh.MarshalAuthorizedKey(other)))
	for _, policy := range []HostKeyPolicy{HostKeyStrict, HostKeyAcceptNew} {
		opts := serverOptions(t, srv)
		opts.KnownHostsFiles = []string{kh}
		opts.HostKeyPolicy = policy
		_, err := Dial(context.Background(), srv.Target(), opts)
		require.Truef(t, errors.Is(err, ErrHostKeyChanged), "policy %d: Dial with a changed key: %v, want ErrHostKeyChanged", policy, err)
		assert.Truef(t, strings.Contains(err.Error(), "HAS CHANGED") && strings.Contains(err.Error(), kh+":1"), "error does not say loudly what changed and where: %v", err)
	}
	b, _ := os.ReadFile(kh)
	require.Truef(t, bytes.Count(b, []byte("\n")) == 1, "known_hosts was modified:\n%s", b)
}

func TestHostKeyRevokedIsRefused(t *testing.T) {
	srv := sshtest.Start(t)
	dir := t.TempDir()
	var kh strings.Builder
	for _, k := range srv.HostKeys {
		fmt.Fprintf(&kh, "@revoked [127.0.0.1]:%d %s", srv.Port, xssh.MarshalAuthorizedKey(k))
		fmt.Fprintf(&kh, "[127.0.0.1]:%d %s", srv.Port, xssh.MarshalAuthorizedKey(k))
	}
	opts := serverOptions(t, srv)
	opts.KnownHostsFiles = []string{writeTestFile(t, dir, "known_hosts", kh.String())}
	_, err := Dial(context.Background(), srv.Target(), opts)
	var hke *HostKeyError
	require.Truef(t, errors.Is(err, ErrHostKeyChanged) && errors.As(err, &hke) && hke.Revoked, "Dial with a revoked key: %v, want a revoked HostKeyError", err)
}

// A host known only by its second key type must be accepted: the client
// has to ask for that type rather than take the server's preferred one.
func TestHostKnownByOneOfSeveralKeys(t *testing.T) {
	srv := sshtest.Start(t)
	for _, k := range srv.HostKeys {
		t.Run(k.Type(), func(t *testing.T) {
			opts := serverOptions(t, srv)
			opts.KnownHostsFiles = []string{writeTestFile(t, t.TempDir(), "known_hosts",
				fmt.Sprintf("[127.0.0.1]:%d %s", srv.Port, xssh.MarshalAuthorizedKey(k)))}
			tr := dialServer(t, srv, opts)
			out, _, _ := run(t, tr, "echo ok", nil)
			require.Truef(t, out == "ok\n", "got %q", out)
		})
	}
}

func TestHostKeyAcceptNewRecordsTheKey(t *testing.T) {
	srv := sshtest.Start(t)
	kh := filepath.Join(t.TempDir(), "sub", "known_hosts")
	opts := serverOptions(t, srv)
	opts.KnownHostsFiles = []string{kh}
	opts.HostKeyPolicy = HostKeyAcceptNew
	tr := dialServer(t, srv, opts)
	tr.Close()

	b, err := os.ReadFile(kh)
	require.NoError(t, err, "known_hosts not written")
	require.Truef(t, strings.HasPrefix(string(b), fmt.Sprintf("[127.0.0.1]:%d ", srv.Port)) && bytes.Count(b, []byte("\n")) == 1, "unexpected known_hosts:\n%s", b)
	// Now known: a strict connection succeeds and writes nothing.
	opts.HostKeyPolicy = HostKeyStrict
	dialServer(t, srv, opts).Close()
	b2, _ := os.ReadFile(kh)
	require.Truef(t, bytes.Equal(b, b2), "known_hosts changed on a second connection:\n%s", b2)
}

func TestAuthWithAgent(t *testing.T) {
	srv := sshtest.Start(t)
	dir := t.TempDir()
	key := sshtest.WriteKey(t, filepath.Join(dir, "agent_key"), "")
	srv.Authorize(t, key.Signer.PublicKey())
	os.Remove(key.Path) // only the agent has it
	sock := sshtest.StartAgent(t, key.Private)

	opts := serverOptions(t, srv)
	opts.IdentityFiles = nil
	opts.AgentSocket = sock
	tr := dialServer(t, srv, opts)
	out, _, _ := run(t, tr, "echo via-agent", nil)
	require.Truef(t, out == "via-agent\n", "got %q", out)
}

func TestAuthEncryptedKeyWithoutAgent(t *testing.T) {
	srv := sshtest.Start(t)
	dir := t.TempDir()
	key := sshtest.WriteKey(t, filepath.Join(dir, "id_ed25519"), "correct horse")
	srv.Authorize(t, key.Signer.PublicKey())

	opts := serverOptions(t, srv)
	opts.IdentityFiles = []string{key.Path}
	_, err := Dial(context.Background(), srv.Target(), opts)
	require.Truef(t, errors.Is(err, ErrKeyEncrypted) && errors.Is(err, ErrAuthFailed), "Dial with only an encrypted key: %v, want ErrKeyEncrypted", err)
	for _, want := range []string{key.Path, "ssh-add " + key.Path} {
		assert.Truef(t, strings.Contains(err.Error(), want), "error %q does not mention %q", err, want)
	}

	// The same key file is fine once the agent holds the key.
	opts.AgentSocket = sshtest.StartAgent(t, key.Private)
	tr := dialServer(t, srv, opts)
	out, _, _ := run(t, tr, "echo ok", nil)
	require.Truef(t, out == "ok\n", "got %q", out)
}

func TestAuthRejectedKey(t *testing.T) {
	srv := sshtest.Start(t)
	opts := serverOptions(t, srv)
	opts.IdentityFiles = []string{sshtest.WriteKey(t, filepath.Join(t.TempDir(), "stranger"), "").Path}
	_, err := Dial(context.Background(), srv.Target(), opts)
	require.Truef(t, errors.Is(err, ErrAuthFailed) && !errors.Is(err, ErrKeyEncrypted), "Dial with an unauthorized key: %v, want ErrAuthFailed", err)
	assert.Truef(t, strings.Contains(err.Error(), "stranger"), "error does not name the key offered: %v", err)
}

func TestConfigAlias(t *testing.T) {
	srv := sshtest.Start(t)
	// Everything (HostName, Port, User, IdentityFile, known hosts) comes
	// from the config file.
	opts := Options{ConfigFile: srv.SSHConfig, Home: t.TempDir(), Logger: testLogger(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := Dial(ctx, "ssh://"+srv.Alias, opts)
	require.NoError(t, err, "Dial via alias")
	defer tr.Close()
	if want := fmt.Sprintf("ssh://%s@%s:%d", srv.User, srv.Alias, srv.Port); tr.Name() != want {
		assert.Fail(t, fmt.Sprintf("Name() = %q, want %q", tr.Name(), want))
	}
	out, _, _ := run(t, tr, "echo aliased", nil)
	require.Truef(t, out == "aliased\n", "got %q", out)
}

func TestProxyJump(t *testing.T) {
	jump := sshtest.Start(t)
	target := sshtest.Start(t)
	dir := t.TempDir()
	kh := writeTestFile(t, dir, "known_hosts", readFile(t, jump.KnownHosts)+readFile(t, target.KnownHosts))
	cfg := writeTestFile(t, dir, "config", fmt.Sprintf(`Host jumpbox
  HostName 127.0.0.1
  Port %d
  User %s
Host inner
  HostName 127.0.0.1
  Port %d
  User %s
  ProxyJump jumpbox
Host *
  IdentityFile %s
  IdentityFile %s
  UserKnownHostsFile %s
  IdentityAgent none
`, jump.Port, jump.User, target.Port, target.User, jump.ClientKey, target.ClientKey, kh))
	d := &recordingDialer{}
	opts := Options{ConfigFile: cfg, Home: dir, Logger: testLogger(t), Dial: d.Dial}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := Dial(ctx, "ssh://inner", opts)
	require.NoError(t, err, "Dial through ProxyJump")
	defer tr.Close()
	out, _, _ := run(t, tr, "echo inner", nil)
	require.Truef(t, out == "inner\n", "got %q", out)
	// Only the jump host was dialled directly.
	if d.dialCount() != 1 || d.last().RemoteAddr().String() != jump.Addr() {
		require.FailNow(t, fmt.Sprintf("dialled %d connections, last to %s; want one, to the jump host %s", d.dialCount(), d.last().RemoteAddr(), jump.Addr()))
	}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func TestUnreachableHostIsUnavailable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	opts := Options{ConfigFile: "none", Home: t.TempDir(), AgentSocket: "none", Logger: testLogger(t)}
	_, err = Dial(context.Background(), "ssh://root@"+addr, opts)
	require.Truef(t, errors.Is(err, env.ErrUnavailable), "Dial to a closed port: %v, want ErrUnavailable", err)
}

// A server that accepts TCP and never speaks SSH must not hang Dial:
// ClientConfig.Timeout covers only the connect.
func TestHandshakeTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	dir := t.TempDir()
	key := sshtest.WriteKey(t, filepath.Join(dir, "k"), "")
	opts := Options{ConfigFile: "none", Home: dir, AgentSocket: "none", IdentityFiles: []string{key.Path},
		HandshakeTimeout: 300 * time.Millisecond, Logger: testLogger(t)}
	done := make(chan error, 1)
	go func() {
		_, err := Dial(context.Background(), "ssh://root@"+l.Addr().String(), opts)
		done <- err
	}()
	select {
	case err := <-done:
		require.Truef(t, errors.Is(err, env.ErrUnavailable), "Dial to a silent server: %v, want ErrUnavailable", err)
	case <-time.After(60 * time.Second):
		require.FailNow(t, "Dial to a silent server hung past its handshake timeout")
	}
	if c, ok := <-accepted; ok {
		c.Close()
	}
}

func TestReconnectAfterClientSideCut(t *testing.T) {
	srv := sshtest.Start(t)
	d := &recordingDialer{}
	opts := serverOptions(t, srv)
	opts.Dial = d.Dial
	opts.ReconnectMin = 20 * time.Millisecond
	tr := dialServer(t, srv, opts)
	run(t, tr, "true", nil)

	d.last().Close()
	// The drop is noticed and the connection re-established without any
	// Exec prompting it.
	require.Eventually(t, func() bool { return d.dialCount() >= 2 },
		condWait, condPoll, "waiting for a second dial")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, tr.WaitConnected(ctx))
	out, _, _ := run(t, tr, "echo back", nil)
	require.Truef(t, out == "back\n", "got %q", out)
}

// An Exec issued right after a drop waits for the reconnect (nothing was
// sent yet, so this is safe) instead of failing.
func TestExecWaitsForReconnect(t *testing.T) {
	srv := sshtest.Start(t)
	d := &recordingDialer{}
	opts := serverOptions(t, srv)
	opts.Dial = d.Dial
	opts.ReconnectMin = 20 * time.Millisecond
	opts.ReconnectWait = 60 * time.Second
	tr := dialServer(t, srv, opts)
	run(t, tr, "true", nil)
	d.last().Close()
	out, _, _ := run(t, tr, "echo waited", nil)
	require.Truef(t, out == "waited\n", "got %q", out)
	if d.dialCount() != 2 {
		require.FailNow(t, fmt.Sprintf("%d dials, want 2", d.dialCount()))
	}
}

func TestExecDuringDropIsUnavailable(t *testing.T) {
	srv := sshtest.Start(t)
	opts := serverOptions(t, srv)
	opts.ReconnectMin = 50 * time.Millisecond
	opts.ReconnectMax = 100 * time.Millisecond
	opts.ReconnectWait = -1 // fail at once
	tr := dialServer(t, srv, opts)
	srv.Stop()
	// Until the supervisor notices, an Exec may fail on the dead
	// connection; either way it must be ErrUnavailable, never an exit code.
	for i := 0; i < 3; i++ {
		code, err := tr.Exec(context.Background(), "true", nil, nil, nil)
		require.Truef(t, errors.Is(err, env.ErrUnavailable), "Exec with sshd down: code %d err %v, want ErrUnavailable", code, err)
	}
	srv.Restart(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, tr.WaitConnected(ctx))
	out, _, _ := run(t, tr, "echo back", nil)
	require.Truef(t, out == "back\n", "got %q", out)
}

// A peer that silently stops answering is detected by the keepalive and
// the connection is replaced.
func TestKeepAliveDetectsSilentPeer(t *testing.T) {
	srv := sshtest.Start(t)
	d := &recordingDialer{}
	opts := serverOptions(t, srv)
	opts.Dial = d.Dial
	opts.KeepAliveInterval = 50 * time.Millisecond
	opts.KeepAliveTimeout = 200 * time.Millisecond
	opts.ReconnectMin = 20 * time.Millisecond
	tr := dialServer(t, srv, opts)
	run(t, tr, "true", nil)

	d.last().Freeze()
	require.Eventually(t, func() bool { return d.dialCount() >= 2 },
		condWait, condPoll, "waiting for a reconnect after the keepalive timed out")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, tr.WaitConnected(ctx))
	out, _, _ := run(t, tr, "echo alive", nil)
	require.Truef(t, out == "alive\n", "got %q", out)
}

// After a reconnect the host key is verified again: a server that comes
// back with another key is refused, loudly, and Exec reports why.
func TestReconnectRefusesChangedHostKey(t *testing.T) {
	srv := sshtest.Start(t)
	dir := t.TempDir()
	kh := writeTestFile(t, dir, "known_hosts", readFile(t, srv.KnownHosts))
	opts := serverOptions(t, srv)
	opts.KnownHostsFiles = []string{kh}
	opts.ReconnectMin = 20 * time.Millisecond
	opts.ReconnectMax = 50 * time.Millisecond
	tr := dialServer(t, srv, opts)

	// The known entries now name other keys: as if the server changed.
	other := sshtest.WriteKey(t, filepath.Join(dir, "other"), "").Signer.PublicKey()
	writeTestFile(t, dir, "known_hosts", fmt.Sprintf("[127.0.0.1]:%d %s", srv.Port, xssh.MarshalAuthorizedKey(other)))
	srv.Restart(t)

	var err error
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err = tr.Exec(context.Background(), "true", nil, nil, nil)
		assert.ErrorIs(c, err, ErrHostKeyChanged)
	}, condWait, condPoll, "waiting for Exec to report the changed key")
	require.Falsef(t, errors.Is(err, env.ErrUnavailable), "a refused host key must not look transient: %v", err)
}

// IdentitiesOnly keeps agent keys that match no identity file from being
// offered.
func TestIdentitiesOnlyFiltersAgentKeys(t *testing.T) {
	srv := sshtest.Start(t)
	dir := t.TempDir()
	agentKey := sshtest.WriteKey(t, filepath.Join(dir, "agent_key"), "")
	srv.Authorize(t, agentKey.Signer.PublicKey())
	other := sshtest.WriteKey(t, filepath.Join(dir, "other"), "") // not authorized
	sock := sshtest.StartAgent(t, agentKey.Private)

	for _, only := range []string{"no", "yes"} {
		cfg := writeTestFile(t, dir, "config_"+only, fmt.Sprintf(
			"Host *\n  IdentitiesOnly %s\n  IdentityFile %s\n  IdentityAgent %s\n  UserKnownHostsFile %s\n",
			only, other.Path, sock, srv.KnownHosts))
		opts := Options{ConfigFile: cfg, Home: dir, Logger: testLogger(t)}
		tr, err := Dial(context.Background(), srv.Target(), opts)
		switch {
		case only == "no" && err != nil:
			assert.Fail(t, fmt.Sprintf("IdentitiesOnly no: the agent key should be offered: %v", err))
		case only == "yes" && !errors.Is(err, ErrAuthFailed):
			assert.Fail(t, fmt.Sprintf("IdentitiesOnly yes: %v, want ErrAuthFailed (agent key not offered)", err))
		}
		if tr != nil {
			tr.Close()
		}
	}
}
