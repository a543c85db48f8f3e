package env

import (
	"path"
	"strings"
)

// SecretPatterns lists the glob patterns (path.Match syntax, matched against
// the upper-cased variable name) of variables that look like credentials.
// Backends that hand their own environment to commands (env/local) drop
// these unless the caller allows them by name. Names are matched
// case-insensitively.
var SecretPatterns = []string{
	"*_API_KEY", "*_APIKEY", "API_KEY",
	"*_TOKEN", "*_TOKENS", "TOKEN",
	"*_SECRET", "*_SECRET_*", "SECRET", "*_SECRETS",
	"*_PASSWORD", "*_PASSWD", "PASSWORD", "*_PASS",
	"*_PRIVATE_KEY", "*_CREDENTIALS", "*_CREDENTIAL",
	"AWS_*", "AZURE_*", "GOOGLE_APPLICATION_CREDENTIALS", "GCP_*",
	"GITHUB_TOKEN", "GH_TOKEN", "GITLAB_TOKEN", "NPM_TOKEN", "PYPI_TOKEN",
	"OPENAI_*", "ANTHROPIC_*", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
	"DOCKER_AUTH_CONFIG", "SSH_AUTH_SOCK", "DATABASE_URL",
}

// IsSecretName reports whether an environment variable called name matches
// SecretPatterns.
func IsSecretName(name string) bool {
	up := strings.ToUpper(name)
	for _, p := range SecretPatterns {
		if ok, _ := path.Match(p, up); ok {
			return true
		}
	}
	return false
}

// FilterSecrets returns environ (KEY=VALUE entries) without the entries whose
// name IsSecretName, except names listed in allow (exact, case-sensitive).
func FilterSecrets(environ []string, allow []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if IsSecretName(name) && !contains(allow, name) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
