package sdk

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestScheme(t *testing.T) {
	for target, want := range map[string]string{"bwrap://x": "bwrap", "localplugin://": "localplugin", "nothing": ""} {
		got := Scheme(target)
		assert.Truef(t, got == want, "Scheme(%q) = %q, want %q", target, got, want)
	}
}
