// Package secrets is the local backend's credential filter: which of a
// supervisor's environment variables a command it starts may see. It is
// a package of its own, free of the backend, because the thin command
// line filters its caller's environment before sending it to the daemon.
package secrets

import (
	"os/user"
	"path"
	"slices"
	"strings"

	"github.com/corralhq/corral/env"
)

// secretPatterns lists the glob patterns (path.Match syntax, matched against
// the upper-cased variable name) of variables that look like credentials.
// The local backend hands the supervisor's own environment to commands, so
// it drops these unless Options.AllowEnv names them; sandbox backends start
// from the sandbox's environment and have nothing of the supervisor's to
// leak. docs/backends.md lists the same patterns (TestBackendsDocListsSecretPatterns).
var secretPatterns = []string{
	"*_API_KEY", "*_APIKEY", "API_KEY",
	"*_TOKEN", "*_TOKENS", "TOKEN",
	"*_SECRET", "*_SECRET_*", "SECRET", "*_SECRETS",
	"*_PASSWORD", "*_PASSWD", "PASSWORD", "*_PASS",
	"*_PRIVATE_KEY", "*_CREDENTIALS", "*_CREDENTIAL",
	"AWS_*", "AZURE_*", "GOOGLE_APPLICATION_CREDENTIALS", "GCP_*",
	"GITHUB_TOKEN", "GH_TOKEN", "GITLAB_TOKEN", "NPM_TOKEN", "PYPI_TOKEN",
	"OPENAI_*", "ANTHROPIC_*", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
	"DOCKER_AUTH_CONFIG", "SSH_AUTH_SOCK", "DATABASE_URL",
	"SECRET_*", "PGPASSWORD", "MYSQL_PWD",
}

// IsSecretName reports whether an environment variable called name matches
// secretPatterns, case-insensitively.
func IsSecretName(name string) bool {
	up := strings.ToUpper(name)
	for _, p := range secretPatterns {
		if ok, _ := path.Match(p, up); ok {
			return true
		}
	}
	return false
}

// ShimVar is the variable through which the local backend hands its shim
// its settings; no command ever inherits it.
const ShimVar = "CORRAL_LOCAL_SHIM"

// CommandEnviron returns the entries of environ that the local backend
// passes to a command: those that do not look like credentials, and those
// allow names; never the shim's variable, nor an entry whose name no
// portable shell can hold (a bash exported function, BASH_FUNC_f%%). A
// client of the daemon sends its own environment filtered so as the
// command's (env.Spec.Environ), since the daemon's is not the caller's.
func CommandEnviron(environ, allow []string) []string {
	kept := FilterSecrets(environ, allow)
	out := kept[:0]
	for _, kv := range kept {
		name, _, _ := strings.Cut(kv, "=")
		if name != ShimVar && env.ValidEnvName(name) {
			out = append(out, kv)
		}
	}
	return out
}

// DefaultPath is the PATH of AccountEnviron: the system's directories, as
// a login shell of a fresh account would have them.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// AccountEnviron is the base environment of a supervisor that serves other
// callers (the daemon): what a command gets from it when its caller sent
// no environment (an API client that gives no environ). It holds the
// account's HOME, USER and LOGNAME (from the user database, not from the
// supervisor's environment) and DefaultPath, and nothing of the
// environment the supervisor happened to be started with: a daemon
// auto-started from a shell with a virtualenv, KUBECONFIG or AWS_PROFILE
// must not hand them to every later caller.
func AccountEnviron() []string {
	out := []string{"PATH=" + DefaultPath}
	if u, err := user.Current(); err == nil {
		if u.HomeDir != "" {
			out = append(out, "HOME="+u.HomeDir)
		}
		if u.Username != "" {
			out = append(out, "USER="+u.Username, "LOGNAME="+u.Username)
		}
	}
	return out
}

// FilterSecrets returns environ (KEY=VALUE entries) without the entries whose
// name IsSecretName, except names listed in allow (exact, case-sensitive).
func FilterSecrets(environ []string, allow []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if IsSecretName(name) && !slices.Contains(allow, name) {
			continue
		}
		out = append(out, kv)
	}
	return out
}
