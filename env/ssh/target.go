package ssh

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kevinburke/ssh_config"
)

// ErrBadTarget matches errors for a target string that is not a valid
// ssh://[user@]host[:port] address.
var ErrBadTarget = errors.New("ssh: invalid target")

// destination is a target as written by the caller: what the URL says,
// before ~/.ssh/config is consulted.
type destination struct {
	user string // "" when the URL names none
	host string // host name, alias or IP address (IPv6 without brackets)
	port int    // 0 when the URL names none
}

// parseTarget parses ssh://[user@]host[:port]. Paths, queries, passwords
// and fragments are rejected rather than ignored, so a typo never silently
// connects somewhere unexpected.
func parseTarget(target string) (destination, error) {
	bad := func(reason string) error {
		return fmt.Errorf("%w %q: %s (want ssh://[user@]host[:port])", ErrBadTarget, target, reason)
	}
	if !strings.HasPrefix(target, "ssh://") {
		return destination{}, bad("missing ssh:// scheme")
	}
	u, err := url.Parse(target)
	if err != nil {
		return destination{}, bad(err.Error())
	}
	if u.Path != "" && u.Path != "/" {
		return destination{}, bad("a path is not allowed")
	}
	if u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return destination{}, bad("query and fragment are not allowed")
	}
	var d destination
	if u.User != nil {
		if _, has := u.User.Password(); has {
			return destination{}, bad("passwords are not accepted in targets; use a key or ssh-agent")
		}
		d.user = u.User.Username()
		if !validUser(d.user) {
			return destination{}, bad("user must match [A-Za-z0-9_][A-Za-z0-9_.-]*")
		}
	}
	d.host = u.Hostname()
	if d.host == "" {
		return destination{}, bad("no host")
	}
	if !validHost(d.host) {
		return destination{}, bad("host must be a name, an alias or an IP address")
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return destination{}, bad("port must be 1-65535")
		}
		d.port = n
	}
	return d, nil
}

func validUser(s string) bool {
	if s == "" || len(s) > 64 || s[0] == '-' || s[0] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c == '.' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func validHost(s string) bool {
	if net.ParseIP(s) != nil {
		return true
	}
	if len(s) > 253 || s[0] == '-' || s[0] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c == '.' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// resolved is a destination completed from ssh_config and defaults: every
// value needed to dial, authenticate and check the host key.
type resolved struct {
	alias           string   // host as written in the target
	user            string   // remote user
	hostName        string   // what is dialled (HostName, else alias)
	port            int      // remote port
	identityFiles   []string // absolute paths, in order
	identitiesOnly  bool     // IdentitiesOnly yes: agent keys only if they match identityFiles
	knownHostsFiles []string // absolute paths; the first one receives accept-new entries
	agentSocket     string   // "" disables the agent
	proxyJump       string   // ProxyJump value, "" for a direct connection
}

// addr is host:port for dialling and for known_hosts lookups, the same
// name OpenSSH checks (HostName, not the alias).
func (r resolved) addr() string {
	return net.JoinHostPort(r.hostName, strconv.Itoa(r.port))
}

// sshConfig is the subset of an ssh_config lookup resolution needs.
type sshConfig interface {
	Get(alias, key string) (string, error)
	GetAll(alias, key string) ([]string, error)
}

// loadConfigs reads the ssh_config files in OpenSSH's order: an explicit
// file replaces both defaults (as `ssh -F` does); "none" reads nothing.
func loadConfigs(configFile, home string) ([]sshConfig, error) {
	var files []string
	switch configFile {
	case "none":
		return nil, nil
	case "":
		files = []string{filepath.Join(home, ".ssh", "config"), "/etc/ssh/ssh_config"}
	default:
		files = []string{configFile}
	}
	var cfgs []sshConfig
	for i, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && configFile == "" {
				continue
			}
			return nil, fmt.Errorf("ssh: read config %s: %w", f, err)
		}
		c, err := ssh_config.DecodeBytes(data)
		if err != nil {
			if configFile == "" && i > 0 {
				// The system file belongs to the distribution: a construct
				// the parser does not know must not make corral unusable.
				continue
			}
			return nil, fmt.Errorf("ssh: parse config %s: %w", f, err)
		}
		cfgs = append(cfgs, c)
	}
	return cfgs, nil
}

// configLookup answers ssh_config questions with OpenSSH's rule: the first
// value obtained wins, the user file before the system file.
type configLookup struct {
	alias string
	cfgs  []sshConfig
}

func (l configLookup) get(key string) (string, error) {
	for _, c := range l.cfgs {
		v, err := c.Get(l.alias, key)
		if err != nil {
			return "", fmt.Errorf("ssh: config %s for %s: %w", key, l.alias, err)
		}
		if v != "" {
			return v, nil
		}
	}
	return "", nil
}

func (l configLookup) getAll(key string) ([]string, error) {
	var all []string
	for _, c := range l.cfgs {
		v, err := c.GetAll(l.alias, key)
		if err != nil {
			return nil, fmt.Errorf("ssh: config %s for %s: %w", key, l.alias, err)
		}
		all = append(all, v...)
	}
	return all, nil
}

// resolve completes d from the ssh_config files and Options, in OpenSSH's
// precedence: the target URL, then Options, then the config, then defaults.
func resolve(d destination, opts Options, home string) (resolved, error) {
	cfgs, err := loadConfigs(opts.ConfigFile, home)
	if err != nil {
		return resolved{}, err
	}
	lk := configLookup{alias: d.host, cfgs: cfgs}
	r := resolved{alias: d.host, user: d.user, port: d.port}

	localUser := currentUser()
	if r.user == "" {
		if r.user, err = lk.get("User"); err != nil {
			return resolved{}, err
		}
		if r.user == "" {
			r.user = localUser
		}
		if !validUser(r.user) {
			return resolved{}, fmt.Errorf("%w: user %q from ssh_config must match [A-Za-z0-9_][A-Za-z0-9_.-]*", ErrBadTarget, r.user)
		}
	}

	if r.hostName, err = lk.get("HostName"); err != nil {
		return resolved{}, err
	}
	if r.hostName == "" {
		r.hostName = d.host
	} else {
		r.hostName = strings.ReplaceAll(r.hostName, "%h", d.host)
		if !validHost(r.hostName) {
			return resolved{}, fmt.Errorf("%w: HostName %q for %s in ssh_config is not a host name or IP address", ErrBadTarget, r.hostName, d.host)
		}
	}

	if r.port == 0 {
		p, err := lk.get("Port")
		if err != nil {
			return resolved{}, err
		}
		r.port = 22
		if p != "" {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 || n > 65535 {
				return resolved{}, fmt.Errorf("%w: Port %q for %s in ssh_config must be 1-65535", ErrBadTarget, p, d.host)
			}
			r.port = n
		}
	}

	tokens := tokenExpander{home: home, localUser: localUser, remoteUser: r.user, host: r.hostName, alias: d.host, port: r.port}

	// Identity files: those given in Options first, then the config's; the
	// default key names only when neither names any, as OpenSSH does.
	idFiles := append([]string(nil), opts.IdentityFiles...)
	cfgIDs, err := lk.getAll("IdentityFile")
	if err != nil {
		return resolved{}, err
	}
	idFiles = append(idFiles, cfgIDs...)
	if len(idFiles) == 0 {
		for _, name := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
			idFiles = append(idFiles, filepath.Join(home, ".ssh", name))
		}
	}
	seen := map[string]bool{}
	for _, f := range idFiles {
		if strings.EqualFold(f, "none") {
			continue
		}
		p := tokens.expand(f)
		if !seen[p] {
			seen[p] = true
			r.identityFiles = append(r.identityFiles, p)
		}
	}
	only, err := lk.get("IdentitiesOnly")
	if err != nil {
		return resolved{}, err
	}
	r.identitiesOnly = strings.EqualFold(only, "yes")

	// Known hosts: Options, else the config's UserKnownHostsFile (a
	// space-separated list), else ~/.ssh/known_hosts; the global files are
	// read too but never written.
	if len(opts.KnownHostsFiles) > 0 {
		for _, f := range opts.KnownHostsFiles {
			r.knownHostsFiles = append(r.knownHostsFiles, tokens.expand(f))
		}
	} else {
		userFiles, err := lk.get("UserKnownHostsFile")
		if err != nil {
			return resolved{}, err
		}
		if userFiles == "" {
			userFiles = "~/.ssh/known_hosts ~/.ssh/known_hosts2"
		}
		globalFiles, err := lk.get("GlobalKnownHostsFile")
		if err != nil {
			return resolved{}, err
		}
		if globalFiles == "" {
			globalFiles = "/etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2"
		}
		for _, f := range strings.Fields(userFiles + " " + globalFiles) {
			if f != "none" && f != "/dev/null" {
				r.knownHostsFiles = append(r.knownHostsFiles, tokens.expand(f))
			}
		}
	}

	switch opts.AgentSocket {
	case "none":
	case "":
		agent, err := lk.get("IdentityAgent")
		if err != nil {
			return resolved{}, err
		}
		switch {
		case agent == "none":
		case agent == "" || agent == "SSH_AUTH_SOCK" || agent == "$SSH_AUTH_SOCK":
			r.agentSocket = os.Getenv("SSH_AUTH_SOCK")
		case strings.HasPrefix(agent, "$"):
			r.agentSocket = os.Getenv(strings.TrimPrefix(agent, "$"))
		default:
			r.agentSocket = tokens.expand(agent)
		}
	default:
		r.agentSocket = opts.AgentSocket
	}

	if r.proxyJump, err = lk.get("ProxyJump"); err != nil {
		return resolved{}, err
	}
	if strings.EqualFold(r.proxyJump, "none") {
		r.proxyJump = ""
	}
	return r, nil
}

// tokenExpander expands the ssh_config tokens and ~ in file names.
type tokenExpander struct {
	home, localUser, remoteUser, host, alias string
	port                                     int
}

func (t tokenExpander) expand(s string) string {
	if s == "~" {
		s = t.home
	} else if strings.HasPrefix(s, "~/") {
		s = filepath.Join(t.home, s[2:])
	}
	if strings.Contains(s, "%") {
		s = strings.NewReplacer(
			"%%", "%",
			"%d", t.home,
			"%u", t.localUser,
			"%r", t.remoteUser,
			"%h", t.host,
			"%n", t.alias,
			"%p", strconv.Itoa(t.port),
		).Replace(s)
	}
	if !filepath.IsAbs(s) {
		// OpenSSH resolves relative identity files against ~/.ssh.
		s = filepath.Join(t.home, ".ssh", s)
	}
	return s
}

func currentUser() string {
	if u, err := user.Current(); err == nil && validUser(u.Username) {
		return u.Username
	}
	if u := os.Getenv("USER"); validUser(u) {
		return u
	}
	return "root"
}
