package ssh

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	xssh "golang.org/x/crypto/ssh"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/ssh/sshtest"
)

// fakeServer is a minimal x/crypto SSH server for behaviour a real sshd
// shows only in rare races. For every exec request it writes some output,
// sends exit-status 0 and then, instead of EOF and CLOSE, drops the TCP
// connection: what a connection lost right after OpenSSH sent exit-status
// (which it may send before the last output) looks like to the client.
type fakeServer struct {
	addr    string
	hostKey xssh.PublicKey
	l       net.Listener
	wg      sync.WaitGroup
}

func startFakeServer(t *testing.T, clientKey xssh.PublicKey) *fakeServer {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	signer, err := xssh.NewSignerFromKey(priv)
	require.NoError(t, err)
	cfg := &xssh.ServerConfig{
		PublicKeyCallback: func(_ xssh.ConnMetadata, k xssh.PublicKey) (*xssh.Permissions, error) {
			if string(k.Marshal()) == string(clientKey.Marshal()) {
				return nil, nil
			}
			return nil, errors.New("unknown key")
		},
	}
	cfg.AddHostKey(signer)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &fakeServer{addr: l.Addr().String(), hostKey: signer.PublicKey(), l: l}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serve(c, cfg)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		s.wg.Wait()
	})
	return s
}

func (s *fakeServer) serve(c net.Conn, cfg *xssh.ServerConfig) {
	defer c.Close()
	sc, chans, reqs, err := xssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	defer sc.Close()
	go xssh.DiscardRequests(reqs)
	for nc := range chans {
		ch, creqs, err := nc.Accept()
		if err != nil {
			return
		}
		for req := range creqs {
			if req.Type != "exec" {
				req.Reply(false, nil)
				continue
			}
			req.Reply(true, nil)
			fmt.Fprint(ch, "partial output")
			status := make([]byte, 4)
			binary.BigEndian.PutUint32(status, 0)
			ch.SendRequest("exit-status", false, status)
			c.Close() // the connection is lost before EOF and CLOSE
			return
		}
	}
}

func TestExitStatusWithoutCleanCloseIsUnavailable(t *testing.T) {
	dir := t.TempDir()
	key := sshtest.WriteKey(t, filepath.Join(dir, "id"), "")
	srv := startFakeServer(t, key.Signer.PublicKey())
	kh := writeTestFile(t, dir, "known_hosts", knownHostsLine(srv.addr, srv.hostKey))
	opts := Options{
		ConfigFile: "none", Home: dir, AgentSocket: "none",
		IdentityFiles: []string{key.Path}, KnownHostsFiles: []string{kh},
		ReconnectWait: -1, ReconnectMin: time.Hour, // no reconnect during the test
		Logger: testLogger(t),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := Dial(ctx, "ssh://root@"+srv.addr, opts)
	require.NoError(t, err)
	defer tr.Close()
	var out strings.Builder
	code, err := tr.Exec(ctx, "echo whatever", nil, &out, nil)
	if !errors.Is(err, env.ErrUnavailable) {
		require.FailNow(t, fmt.Sprintf("Exec = code %d, output %q, err %v; a session whose end was not confirmed must be ErrUnavailable", code, out.String(), err))
	}
}

func knownHostsLine(addr string, k xssh.PublicKey) string {
	host, port, _ := net.SplitHostPort(addr)
	return fmt.Sprintf("[%s]:%s %s", host, port, xssh.MarshalAuthorizedKey(k))
}
