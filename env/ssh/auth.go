package ssh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	xssh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// Sentinel errors for authentication, matched with errors.Is.
var (
	// ErrAuthFailed: the server accepted none of the keys offered.
	ErrAuthFailed = errors.New("ssh: authentication failed")
	// ErrKeyEncrypted: an identity file is protected by a passphrase and
	// no ssh-agent holds it. corral never asks for or accepts passphrases:
	// load the key into ssh-agent (ssh-add FILE) instead.
	ErrKeyEncrypted = errors.New("ssh: identity file is encrypted and not in ssh-agent")
)

// keyring is the set of keys for one handshake: ssh-agent's first, then
// those of the identity files, as OpenSSH orders them.
type keyring struct {
	signers   []xssh.Signer
	offered   []string // descriptions for error messages
	encrypted []string // identity files skipped for want of a passphrase
	problems  []string // other unusable sources, for error messages
	agentConn io.Closer
}

func (k *keyring) Close() {
	if k.agentConn != nil {
		k.agentConn.Close()
	}
}

// loadKeys gathers the keys for one handshake. The agent is dialled anew
// for every connection, so an agent restarted or a key added with ssh-add
// while corral runs is used on the next reconnect. The caller closes the
// keyring once the handshake is over.
func loadKeys(ctx context.Context, r resolved, log *slog.Logger) (*keyring, error) {
	k := &keyring{}
	var agentKeys []*agent.Key
	var agentSigners []xssh.Signer
	if r.agentSocket != "" {
		d := net.Dialer{Timeout: 5 * time.Second}
		conn, err := d.DialContext(ctx, "unix", r.agentSocket)
		if err != nil {
			k.problems = append(k.problems, fmt.Sprintf("ssh-agent at %s: %v", r.agentSocket, err))
			log.Warn("ssh: ssh-agent unreachable", "socket", r.agentSocket, "err", err)
		} else {
			k.agentConn = conn
			ac := agent.NewClient(conn)
			if agentKeys, err = ac.List(); err == nil {
				agentSigners, err = ac.Signers()
			}
			if err != nil {
				k.problems = append(k.problems, fmt.Sprintf("ssh-agent at %s: %v", r.agentSocket, err))
				agentKeys, agentSigners = nil, nil
			}
		}
	}
	inAgent := func(pub xssh.PublicKey) bool {
		for _, a := range agentKeys {
			if bytes.Equal(a.Marshal(), pub.Marshal()) {
				return true
			}
		}
		return false
	}

	var fileSigners []xssh.Signer
	var filePubs []xssh.PublicKey
	var fileNames []string
	for _, path := range r.identityFiles {
		data, err := os.ReadFile(path)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				k.problems = append(k.problems, fmt.Sprintf("identity file %s: %v", path, err))
			}
			continue
		}
		signer, err := xssh.ParsePrivateKey(data)
		var pm *xssh.PassphraseMissingError
		switch {
		case errors.As(err, &pm):
			pub := pm.PublicKey
			if pub == nil {
				pub = readPublicKey(path + ".pub")
			}
			if pub != nil {
				filePubs = append(filePubs, pub)
				if inAgent(pub) {
					continue // the agent signs with it
				}
			}
			k.encrypted = append(k.encrypted, path)
		case err != nil:
			k.problems = append(k.problems, fmt.Sprintf("identity file %s: %v", path, err))
		default:
			fileSigners = append(fileSigners, signer)
			filePubs = append(filePubs, signer.PublicKey())
			fileNames = append(fileNames, path)
		}
	}

	seen := map[string]bool{}
	for i, s := range agentSigners {
		if r.identitiesOnly && !containsKey(filePubs, s.PublicKey()) {
			continue
		}
		seen[string(s.PublicKey().Marshal())] = true
		k.signers = append(k.signers, s)
		k.offered = append(k.offered, fmt.Sprintf("agent key %s %s", agentKeys[i].Comment, xssh.FingerprintSHA256(s.PublicKey())))
	}
	for i, s := range fileSigners {
		if seen[string(s.PublicKey().Marshal())] {
			continue
		}
		k.signers = append(k.signers, s)
		k.offered = append(k.offered, fmt.Sprintf("%s %s", fileNames[i], xssh.FingerprintSHA256(s.PublicKey())))
	}

	if len(k.signers) == 0 {
		k.Close()
		return nil, k.failure(r, nil)
	}
	return k, nil
}

// failure explains why authentication cannot succeed or did not, naming
// what was tried and, for encrypted keys, how to make them usable.
func (k *keyring) failure(r resolved, cause error) error {
	var b strings.Builder
	fmt.Fprintf(&b, "authenticate %s@%s", r.user, r.addr())
	if cause != nil {
		fmt.Fprintf(&b, ": %v", cause)
	}
	if len(k.offered) > 0 {
		fmt.Fprintf(&b, "; offered %s", strings.Join(k.offered, ", "))
	} else {
		b.WriteString("; no usable key")
	}
	if r.agentSocket == "" {
		b.WriteString("; no ssh-agent (SSH_AUTH_SOCK is not set)")
	}
	for _, p := range k.problems {
		fmt.Fprintf(&b, "; %s", p)
	}
	if len(k.encrypted) > 0 {
		fmt.Fprintf(&b, "; %s is encrypted with a passphrase and no ssh-agent holds it: corral never takes passphrases, "+
			"so start ssh-agent and add it with `ssh-add %s`, then retry", strings.Join(k.encrypted, ", "), k.encrypted[0])
		return &AuthError{msg: b.String(), Encrypted: k.encrypted, cause: cause}
	}
	if len(k.offered) == 0 {
		fmt.Fprintf(&b, "; looked for identity files %s", strings.Join(r.identityFiles, ", "))
	}
	return &AuthError{msg: b.String(), cause: cause}
}

// AuthError reports that no key got the connection authenticated. It
// matches ErrAuthFailed, and ErrKeyEncrypted when Encrypted is not empty.
type AuthError struct {
	// Encrypted lists identity files that were skipped because they are
	// protected by a passphrase and no ssh-agent holds them.
	Encrypted []string
	msg       string
	cause     error
}

func (e *AuthError) Error() string { return "ssh: " + e.msg }

// Is matches ErrAuthFailed, and ErrKeyEncrypted when an encrypted key was
// skipped.
func (e *AuthError) Is(target error) bool {
	return target == ErrAuthFailed || target == ErrKeyEncrypted && len(e.Encrypted) > 0
}

// Unwrap returns the handshake error, if any.
func (e *AuthError) Unwrap() error { return e.cause }

func readPublicKey(path string) xssh.PublicKey {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	pub, _, _, _, err := xssh.ParseAuthorizedKey(data)
	if err != nil {
		return nil
	}
	return pub
}

func containsKey(keys []xssh.PublicKey, k xssh.PublicKey) bool {
	for _, x := range keys {
		if bytes.Equal(x.Marshal(), k.Marshal()) {
			return true
		}
	}
	return false
}
