package secrets

import (
	"os"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// secretNames must never reach a command unless allowed by name: each is a
// credential that an agent's own environment commonly holds.
var secretNames = []string{
	// API keys.
	"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GOOGLE_API_KEY", "MY_APIKEY", "API_KEY",
	// Tokens.
	"GITHUB_TOKEN", "GH_TOKEN", "GH_ENTERPRISE_TOKEN", "GITLAB_TOKEN", "NPM_TOKEN",
	"PYPI_TOKEN", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "CARGO_REGISTRY_TOKEN",
	"SLACK_BOT_TOKEN", "VAULT_TOKEN", "CI_JOB_TOKENS", "TOKEN",
	// Secrets and passwords.
	"AZURE_CLIENT_SECRET", "CLIENT_SECRET", "STRIPE_SECRET_KEY", "APP_SECRETS", "SECRET",
	"DB_PASSWORD", "TWINE_PASSWORD", "PASSWORD", "LDAP_PASSWD", "SMTP_PASS",
	"DEPLOY_PRIVATE_KEY", "SERVICE_CREDENTIALS", "REGISTRY_CREDENTIAL",
	// Whole cloud-provider prefixes.
	"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
	"AZURE_TENANT_ID", "GCP_PROJECT", "GOOGLE_APPLICATION_CREDENTIALS",
	"OPENAI_ORG_ID", "ANTHROPIC_BASE_URL",
	// Access paths to credentials.
	"DOCKER_AUTH_CONFIG", "SSH_AUTH_SOCK", "DATABASE_URL",
	// Database clients' own password variables, and secret-first names.
	"PGPASSWORD", "MYSQL_PWD", "SECRET_KEY", "SECRET_KEY_BASE",
	// Matching ignores case.
	"github_token", "Aws_Secret_Access_Key", "openai_api_key", "db_Password",
}

// plainNames must be passed on: commands need them, and none is a
// credential. Several look close to a pattern on purpose.
var plainNames = []string{
	"PATH", "HOME", "TERM", "LANG", "LC_ALL", "PWD", "OLDPWD", "USER", "LOGNAME",
	"SHELL", "TMPDIR", "TZ", "EDITOR", "DISPLAY", "HOSTNAME", "XDG_RUNTIME_DIR",
	"GOPATH", "GOFLAGS", "GOPROXY", "NODE_OPTIONS", "COLORTERM", "SSH_CONNECTION",
	"GPG_TTY", "KEY", "TOKENIZERS_PARALLELISM", "PASSWORD_STORE_DIR", "SECRETARY",
	"BYPASS", "COMPASS", "AWSCLI", "MY_TOKEN_FILE", "path", "home", "",
}

func TestIsSecretName(t *testing.T) {
	for _, name := range secretNames {
		t.Run("secret "+name, func(t *testing.T) {
			assert.True(t, IsSecretName(name))
		})
	}
	for _, name := range plainNames {
		t.Run("plain "+name, func(t *testing.T) {
			assert.False(t, IsSecretName(name))
		})
	}
}

// TestSecretPatternsWellFormed guards against a pattern that path.Match
// rejects: isSecretName would skip it silently and pass the variables on.
func TestSecretPatternsWellFormed(t *testing.T) {
	for _, p := range secretPatterns {
		_, err := path.Match(p, "X")
		require.NoError(t, err, "pattern %q", p)
		// Names are matched upper-cased, so a lower-case pattern never matches.
		assert.Equal(t, p, toUpperASCII(p), "pattern %q", p)
	}
}

func toUpperASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

func TestFilterSecrets(t *testing.T) {
	tests := []struct {
		name    string
		environ []string
		allow   []string
		want    []string
	}{
		{
			name:    "plain variables pass, in order",
			environ: []string{"PATH=/bin", "HOME=/h", "TERM=xterm", "LANG=C.UTF-8", "PWD=/w"},
			want:    []string{"PATH=/bin", "HOME=/h", "TERM=xterm", "LANG=C.UTF-8", "PWD=/w"},
		},
		{
			name: "secrets are dropped",
			environ: []string{"PATH=/bin", "OPENAI_API_KEY=sk-1", "HOME=/h", "AWS_SECRET_ACCESS_KEY=x",
				"GITHUB_TOKEN=ghp_1", "DB_PASSWORD=p", "SSH_AUTH_SOCK=/tmp/agent", "TERM=xterm"},
			want: []string{"PATH=/bin", "HOME=/h", "TERM=xterm"},
		},
		{
			name:    "allowed by exact name",
			environ: []string{"GITHUB_TOKEN=ghp_1", "GH_TOKEN=gho_2", "PATH=/bin"},
			allow:   []string{"GITHUB_TOKEN"},
			want:    []string{"GITHUB_TOKEN=ghp_1", "PATH=/bin"},
		},
		{
			name:    "allow is case-sensitive",
			environ: []string{"github_token=ghp_1", "GITHUB_TOKEN=ghp_2"},
			allow:   []string{"GITHUB_TOKEN"},
			want:    []string{"GITHUB_TOKEN=ghp_2"},
		},
		{
			name:    "allow is not a pattern",
			environ: []string{"GITHUB_TOKEN=ghp_1", "GH_TOKEN=gho_2"},
			allow:   []string{"*_TOKEN", "*"},
			want:    []string{},
		},
		{
			name:    "allowing a plain name changes nothing",
			environ: []string{"PATH=/bin", "NPM_TOKEN=n"},
			allow:   []string{"PATH"},
			want:    []string{"PATH=/bin"},
		},
		{
			name:    "every copy of a secret is dropped",
			environ: []string{"HF_TOKEN=a", "PATH=/bin", "HF_TOKEN=b"},
			want:    []string{"PATH=/bin"},
		},
		{
			name:    "value is not looked at",
			environ: []string{"NOTE=GITHUB_TOKEN=x", "API_KEY_HINT=see docs"},
			want:    []string{"NOTE=GITHUB_TOKEN=x", "API_KEY_HINT=see docs"},
		},
		{
			name:    "entry without = is judged by its name",
			environ: []string{"GITHUB_TOKEN", "PATH"},
			want:    []string{"PATH"},
		},
		{
			name:    "empty values and empty names",
			environ: []string{"TOKEN=", "=C:=C:\\", "EMPTY="},
			want:    []string{"=C:=C:\\", "EMPTY="},
		},
		{
			name:    "nil environ",
			environ: nil,
			want:    []string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]string(nil), tt.environ...)
			got := FilterSecrets(tt.environ, tt.allow)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, in, tt.environ, "the input is not modified")
		})
	}
}

// TestBackendsDocListsSecretPatterns keeps docs/backends.md's list of
// filtered variables equal to the code's: users decide what to pass with
// --allow-env from that list.
func TestBackendsDocListsSecretPatterns(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/backends.md")
	require.NoError(t, err)
	text := string(doc)
	const anchor = "upper-cased name matches one of these `path.Match` globs:"
	start := strings.Index(text, anchor)
	end := strings.Index(text, "`Options.AllowEnv`")
	require.True(t, start >= 0 && end > start, "backends.md: secret pattern section not found")
	var listed []string
	for _, w := range strings.Fields(text[start+len(anchor) : end]) {
		w = strings.TrimRight(w, ",.:")
		if strings.HasPrefix(w, "`") && strings.HasSuffix(w, "`") {
			listed = append(listed, strings.Trim(w, "`"))
		}
	}
	assert.Equal(t, secretPatterns, listed)
}
