package local

import (
	"path"
	"slices"
	"strings"
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

// isSecretName reports whether an environment variable called name matches
// secretPatterns, case-insensitively.
func isSecretName(name string) bool {
	up := strings.ToUpper(name)
	for _, p := range secretPatterns {
		if ok, _ := path.Match(p, up); ok {
			return true
		}
	}
	return false
}

// CommandEnviron returns the entries of environ that the local backend
// passes to a command: those that do not look like credentials, and those
// allow names. A client that runs a command through the daemon on the
// local backend sends its own environment filtered so, since the daemon's
// is not the caller's.
func CommandEnviron(environ, allow []string) []string {
	return dropVars(filterSecrets(environ, allow), func(name string) bool { return name == shimEnvVar })
}

// filterSecrets returns environ (KEY=VALUE entries) without the entries whose
// name isSecretName, except names listed in allow (exact, case-sensitive).
func filterSecrets(environ []string, allow []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if isSecretName(name) && !slices.Contains(allow, name) {
			continue
		}
		out = append(out, kv)
	}
	return out
}
