package env_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/corralhq/corral/env"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidateCheckURL(t *testing.T) {
	for _, ok := range []string{
		"http://127.0.0.1:3000/health",
		"https://localhost/",
		"http://[::1]:8080/x?y=1&z=%20",
		"http://web:80",
	} {
		assert.NoError(t, env.ValidateCheckURL(ok), ok)
	}
	for bad, want := range map[string]string{
		"":                         "is empty",
		"127.0.0.1:3000":           "such as http://",
		"ftp://127.0.0.1/":         "scheme",
		"http:///path":             "no host",
		"http://127.0.0.1/a b":     "percent-encode",
		"http://127.0.0.1/\n":      "percent-encode",
		"http://127.0.0.1/é":       "percent-encode",
		"http://u:p@127.0.0.1/":    "user information",
		"http://-o/":               "starts with '-'",
		"http://127.0.0.1/'$(id)`": "", // valid shape: backends single-quote it
		"http://h/" + strings.Repeat("a", env.MaxCheckURL): "bytes long",
	} {
		err := env.ValidateCheckURL(bad)
		if want == "" {
			assert.NoError(t, err, bad)
			continue
		}
		require.Error(t, err, bad)
		assert.True(t, errors.Is(err, env.ErrInvalidSpec), bad)
		assert.Contains(t, err.Error(), want, bad)
	}
}

func TestValidatePortAndURLReady(t *testing.T) {
	assert.NoError(t, env.ValidatePort(1))
	assert.NoError(t, env.ValidatePort(65535))
	for _, p := range []int{0, -1, 65536} {
		err := env.ValidatePort(p)
		require.Error(t, err)
		assert.ErrorIs(t, err, env.ErrInvalidSpec)
	}
	assert.True(t, env.URLReady(200))
	assert.True(t, env.URLReady(302))
	assert.False(t, env.URLReady(404))
	assert.False(t, env.URLReady(0))
}
