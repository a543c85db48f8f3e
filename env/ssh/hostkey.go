package ssh

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	xssh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// HostKeyPolicy says what to do with a host whose key is not in known_hosts.
// A key that differs from a known one is refused under every policy.
type HostKeyPolicy int

const (
	// HostKeyStrict refuses unknown hosts (the default, OpenSSH's
	// StrictHostKeyChecking=yes). The error carries the key's fingerprint
	// and the command that trusts it.
	HostKeyStrict HostKeyPolicy = iota
	// HostKeyAcceptNew trusts an unknown host on first contact and appends
	// its key to the first known_hosts file (StrictHostKeyChecking=accept-new).
	HostKeyAcceptNew
)

// Sentinel errors for host key verification, matched with errors.Is. The
// concrete error is a *HostKeyError.
var (
	// ErrHostKeyUnknown: known_hosts has no key for the host.
	ErrHostKeyUnknown = errors.New("ssh: host key unknown")
	// ErrHostKeyChanged: known_hosts has a different key for the host (or
	// the key is marked @revoked). Possibly a man-in-the-middle attack;
	// always refused.
	ErrHostKeyChanged = errors.New("ssh: host key changed")
)

// HostKeyError reports a host key that was refused. Its message says what
// was seen and how to proceed.
type HostKeyError struct {
	Host        string   // host:port as checked against known_hosts
	KeyType     string   // type of the key the server offered
	Fingerprint string   // SHA256 fingerprint of the offered key
	Known       []string // file:line of the known entries (changed keys)
	Files       []string // known_hosts files that were read
	Revoked     bool     // the offered key is marked @revoked
	Changed     bool     // a different key is known for the host
}

// Is makes a HostKeyError match ErrHostKeyChanged or ErrHostKeyUnknown.
func (e *HostKeyError) Is(target error) bool {
	if e.Changed || e.Revoked {
		return target == ErrHostKeyChanged
	}
	return target == ErrHostKeyUnknown
}

func (e *HostKeyError) Error() string {
	host, port := splitHostPort(e.Host)
	if e.Revoked {
		return fmt.Sprintf("ssh: REFUSED: the host key of %s (%s %s) is marked @revoked in %s; not connecting",
			e.Host, e.KeyType, e.Fingerprint, strings.Join(e.Known, ", "))
	}
	if e.Changed {
		return fmt.Sprintf("ssh: REFUSED: THE HOST KEY OF %s HAS CHANGED: the server offered %s %s, which does not match "+
			"the key known in %s. Someone may be intercepting the connection (man-in-the-middle), or the host was "+
			"reinstalled. Verify the new fingerprint with the host's administrator; only then remove the old entry with "+
			"`ssh-keygen -R %s -f FILE` and trust the new key",
			e.Host, e.KeyType, e.Fingerprint, strings.Join(e.Known, ", "), knownHostsName(host, port))
	}
	file := "~/.ssh/known_hosts"
	if len(e.Files) > 0 {
		file = e.Files[0]
	}
	scan := "ssh-keyscan"
	if port != "22" {
		scan += " -p " + port
	}
	return fmt.Sprintf("ssh: host %s is unknown: its %s key has fingerprint %s and no entry in %s. "+
		"Verify the fingerprint out of band, then trust it with `%s %s >> %s` "+
		"(or connect once with ssh, or use the accept-new host key policy)",
		e.Host, e.KeyType, e.Fingerprint, strings.Join(e.Files, ", "), scan, host, file)
}

func splitHostPort(hostport string) (string, string) {
	h, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport, "22"
	}
	return h, p
}

// knownHostsName is how known_hosts and ssh-keygen -R name host:port.
func knownHostsName(host, port string) string {
	if port == "22" {
		return host
	}
	return "[" + host + "]:" + port
}

// hostKeys checks server keys against known_hosts files, re-reading them on
// every connection so that an entry the user added or removed takes effect
// on the next reconnect.
type hostKeys struct {
	files  []string // the first one receives accept-new entries
	policy HostKeyPolicy
	log    *slog.Logger
	mu     sync.Mutex // serialises accept-new writes
}

// load reads the files that exist. A file that does not exist is an empty
// database, as for OpenSSH.
func (h *hostKeys) load() (xssh.HostKeyCallback, error) {
	var existing []string
	for _, f := range h.files {
		if _, err := os.Stat(f); err == nil {
			existing = append(existing, f)
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("ssh: known hosts %s: %w", f, err)
		}
	}
	cb, err := knownhosts.New(existing...)
	if err != nil {
		return nil, fmt.Errorf("ssh: read known hosts: %w", err)
	}
	return cb, nil
}

// probeKey is a key no known_hosts file contains; checking it makes the
// database list every key it knows for a host.
var probeKey = func() xssh.PublicKey {
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		panic(err)
	}
	k, err := xssh.NewPublicKey(pub)
	if err != nil {
		panic(err)
	}
	return k
}()

// algorithmsFor returns the host key algorithms to offer in the handshake:
// those of the keys known for hostport. Without this the server picks its
// preferred type, and a host known only by, say, its ECDSA key would fail
// with a spurious mismatch when it offers ed25519. Nil (all algorithms) for
// an unknown host.
func algorithmsFor(cb xssh.HostKeyCallback, hostport string) []string {
	remote := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 22} // only used when hostport is empty
	var ke *knownhosts.KeyError
	if err := cb(hostport, remote, probeKey); !errors.As(err, &ke) || len(ke.Want) == 0 {
		return nil
	}
	var algos []string
	seen := map[string]bool{}
	add := func(a string) {
		if !seen[a] {
			seen[a] = true
			algos = append(algos, a)
		}
	}
	for _, k := range ke.Want {
		switch t := k.Key.Type(); t {
		case xssh.KeyAlgoRSA:
			// One RSA key serves three signature algorithms; prefer SHA-2.
			add(xssh.KeyAlgoRSASHA512)
			add(xssh.KeyAlgoRSASHA256)
			add(xssh.KeyAlgoRSA)
		default:
			add(t)
		}
	}
	return algos
}

// callback returns the HostKeyCallback for one handshake with hostport,
// and the algorithms to offer.
func (h *hostKeys) callback(hostport string) (xssh.HostKeyCallback, []string, error) {
	db, err := h.load()
	if err != nil {
		return nil, nil, err
	}
	algos := algorithmsFor(db, hostport)
	cb := func(hostname string, remote net.Addr, key xssh.PublicKey) error {
		err := db(hostport, remote, key)
		if err == nil {
			return nil
		}
		herr := &HostKeyError{Host: hostport, KeyType: key.Type(), Fingerprint: xssh.FingerprintSHA256(key), Files: h.files}
		var ke *knownhosts.KeyError
		var re *knownhosts.RevokedError
		switch {
		case errors.As(err, &re):
			herr.Revoked = true
			herr.Known = []string{re.Revoked.Filename + ":" + strconv.Itoa(re.Revoked.Line)}
		case errors.As(err, &ke) && len(ke.Want) > 0:
			herr.Changed = true
			for _, w := range ke.Want {
				herr.Known = append(herr.Known, fmt.Sprintf("%s:%d (%s %s)", w.Filename, w.Line, w.Key.Type(), xssh.FingerprintSHA256(w.Key)))
			}
		case errors.As(err, &ke):
			if h.policy == HostKeyAcceptNew {
				return h.trust(hostport, key)
			}
		default:
			return fmt.Errorf("ssh: check host key of %s: %w", hostport, err)
		}
		// Not logged here: the first dial returns it to the caller, and
		// the reconnect loop logs it with its target.
		return herr
	}
	return cb, algos, nil
}

// trust appends key for hostport to the first known_hosts file
// (accept-new). Re-checking under the lock keeps two concurrent first
// connections from writing the entry twice.
func (h *hostKeys) trust(hostport string, key xssh.PublicKey) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.files) == 0 {
		return fmt.Errorf("ssh: accept-new for %s: no known_hosts file to record the key in", hostport)
	}
	if db, err := h.load(); err == nil {
		if db(hostport, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 22}, key) == nil {
			return nil
		}
	}
	file := h.files[0]
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("ssh: accept-new for %s: %w", hostport, err)
	}
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("ssh: accept-new for %s: %w", hostport, err)
	}
	line := knownhosts.Line([]string{knownhosts.Normalize(hostport)}, key) + "\n"
	if st, err := f.Stat(); err == nil && st.Size() > 0 && !endsWithNewline(file) {
		line = "\n" + line
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return fmt.Errorf("ssh: accept-new for %s: write %s: %w", hostport, file, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("ssh: accept-new for %s: write %s: %w", hostport, file, err)
	}
	h.log.Warn("ssh: trusted new host key (accept-new)", "host", hostport, "key_type", key.Type(),
		"fingerprint", xssh.FingerprintSHA256(key), "file", file)
	return nil
}

// endsWithNewline reports whether file's last byte is a newline, so an
// appended entry never merges into a last line that lacks one.
func endsWithNewline(file string) bool {
	f, err := os.Open(file)
	if err != nil {
		return true
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return true
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, st.Size()-1); err != nil {
		return true
	}
	return b[0] == '\n'
}
