package ssh

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/internal/shellquote"
)

func TestParseTarget(t *testing.T) {
	good := map[string]destination{
		"ssh://host":                {host: "host"},
		"ssh://ci@build-1.example":  {user: "ci", host: "build-1.example"},
		"ssh://ci@10.0.0.7:2222":    {user: "ci", host: "10.0.0.7", port: 2222},
		"ssh://[::1]:22":            {host: "::1", port: 22},
		"ssh://deploy_user@alias/":  {user: "deploy_user", host: "alias"},
		"ssh://u.name-x@h_under:65": {user: "u.name-x", host: "h_under", port: 65},
	}
	for in, want := range good {
		got, err := parseTarget(in)
		assert.Truef(t, err == nil && got == want, "parseTarget(%q) = %+v, %v; want %+v", in, got, err, want)
	}
	bad := []string{
		"", "host", "ssh:/host", "http://host", "ssh://", "ssh://user@", "ssh://host:0", "ssh://host:70000",
		"ssh://host:x", "ssh://u:pw@host", "ssh://host/path", "ssh://host?x=1", "ssh://host#f",
		"ssh://-oProxyCommand=x", "ssh://-u@host", "ssh://h;touch x", "ssh://h%20x", "ssh://a'b@host",
	}
	for _, in := range bad {
		d, err := parseTarget(in)
		assert.Truef(t, errors.Is(err, ErrBadTarget), "parseTarget(%q) = %+v, %v; want ErrBadTarget", in, d, err)
	}
}

func TestResolveFromConfig(t *testing.T) {
	home := t.TempDir()
	cfg := filepath.Join(home, "cfg")
	os.WriteFile(cfg, []byte(`
Host build
  HostName 192.0.2.10
  User ci
  Port 2200
  IdentityFile ~/.ssh/build_key
  IdentityFile %d/keys/%r@%h
  UserKnownHostsFile ~/kh1 /abs/kh2
  IdentitiesOnly yes
  IdentityAgent none
Host jumped
  ProxyJump bastion
Host *
  User fallback
  IdentityFile ~/.ssh/common
`), 0o600)
	opts, home, err := Options{ConfigFile: cfg, Home: home}.withDefaults()
	require.NoError(t, err)

	r, err := resolve(destination{host: "build"}, opts, home)
	require.NoError(t, err)
	want := resolved{
		alias: "build", user: "ci", hostName: "192.0.2.10", port: 2200,
		identityFiles:   []string{home + "/.ssh/build_key", home + "/keys/ci@192.0.2.10", home + "/.ssh/common"},
		identitiesOnly:  true,
		knownHostsFiles: []string{home + "/kh1", "/abs/kh2", "/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"},
	}
	assert.Truef(t, reflect.DeepEqual(r, want), "resolve(build) =\n%+v\nwant\n%+v", r, want)

	// The URL's user and port win over the config, as on ssh's command line.
	r, err = resolve(destination{host: "build", user: "admin", port: 22}, opts, home)
	require.NoError(t, err)
	assert.Truef(t, r.user == "admin" && r.port == 22 && r.hostName == "192.0.2.10", "URL user/port did not win: %+v", r)

	// Options.IdentityFiles come first; no config match falls to Host *.
	opts.IdentityFiles = []string{"/opt/key"}
	opts.AgentSocket = "/run/agent.sock"
	r, err = resolve(destination{host: "other"}, opts, home)
	require.NoError(t, err)
	assert.Truef(t, r.user == "fallback" && r.hostName == "other" && r.port == 22 && r.agentSocket == "/run/agent.sock" && reflect.DeepEqual(r.identityFiles, []string{"/opt/key", home + "/.ssh/common"}), "resolve(other) = %+v", r)
	if r, _ := resolve(destination{host: "jumped"}, opts, home); r.proxyJump != "bastion" {
		assert.Fail(t, fmt.Sprintf("ProxyJump not read: %+v", r))
	}
}

func TestResolveDefaults(t *testing.T) {
	home := t.TempDir()
	t.Setenv("SSH_AUTH_SOCK", "/tmp/agent-test.sock")
	opts, home, err := Options{Home: home}.withDefaults() // ~/.ssh/config absent
	require.NoError(t, err)
	opts.ConfigFile = "none"
	r, err := resolve(destination{host: "h"}, opts, home)
	require.NoError(t, err)
	wantIDs := []string{home + "/.ssh/id_ed25519", home + "/.ssh/id_ecdsa", home + "/.ssh/id_rsa"}
	assert.Truef(t, r.port == 22 && r.user != "" && reflect.DeepEqual(r.identityFiles, wantIDs) && r.knownHostsFiles[0] == home+"/.ssh/known_hosts" && r.agentSocket == "/tmp/agent-test.sock", "defaults: %+v", r)
}

func TestResolveRejectsUnsafeConfigValues(t *testing.T) {
	home := t.TempDir()
	cfg := filepath.Join(home, "cfg")
	os.WriteFile(cfg, []byte("Host a\n  HostName x;touch /tmp/y\nHost b\n  User -oProxyCommand=x\nHost c\n  Port 99999\n"), 0o600)
	opts, home, _ := Options{ConfigFile: cfg, Home: home}.withDefaults()
	for _, h := range []string{"a", "b", "c"} {
		_, err := resolve(destination{host: h}, opts, home)
		assert.Truef(t, errors.Is(err, ErrBadTarget), "resolve(%s): %v, want ErrBadTarget", h, err)
	}
}

// remoteCommand must give back every byte sequence of the script
// literally, through the shell that parses the exec request and then
// /bin/sh (and, in TestExec, through a real remote login shell too).
func TestRemoteCommand(t *testing.T) {
	cases := []string{
		"", "plain", "it's", "''", "'", `"double"`, "$HOME $(id) `id`", "a\nb\tc", "\\", "\\'",
		"/tmp/a; touch /tmp/pwned #", "*", "-n", "é ü 日本", "\x01\x7f",
	}
	for _, s := range cases {
		cmd := remoteCommand("printf %s " + shellquote.Quote(s))
		out, err := exec.Command("/bin/sh", "-c", cmd).Output()
		assert.Truef(t, err == nil && string(out) == s, "sh -c %s = %q, %v; want %q", cmd, out, err, s)
	}
	got, want := remoteCommand("echo 'x'"), `/bin/sh -c 'echo '\''x'\'''`
	assert.Truef(t, got == want, "remoteCommand = %s, want %s", got, want)
}

func TestHostKeyErrorMessages(t *testing.T) {
	unknown := &HostKeyError{Host: "example.org:22", KeyType: "ssh-ed25519", Fingerprint: "SHA256:abc", Files: []string{"/h/.ssh/known_hosts"}}
	assert.True(t, errors.Is(unknown, ErrHostKeyUnknown) && !errors.Is(unknown, ErrHostKeyChanged), "unknown key matches the wrong sentinel")
	if want := "`ssh-keyscan example.org >> /h/.ssh/known_hosts`"; !strings.Contains(unknown.Error(), want) {
		assert.Fail(t, fmt.Sprintf("%s\ndoes not contain %s", unknown, want))
	}
	changed := &HostKeyError{Host: "127.0.0.1:2222", KeyType: "ssh-ed25519", Fingerprint: "SHA256:abc", Changed: true, Known: []string{"f:3"}}
	assert.True(t, errors.Is(changed, ErrHostKeyChanged) && !errors.Is(changed, ErrHostKeyUnknown), "changed key matches the wrong sentinel")
	want := "ssh-keygen -R [127.0.0.1]:2222"
	assert.Truef(t, strings.Contains(changed.Error(), want), "%s\ndoes not contain %s", changed, want)
}
